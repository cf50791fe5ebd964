"""The listing page reader: the regular-expression path gives what ElementTree gives,
and declines (so ElementTree reads it) any page that is not plainly shaped."""

from __future__ import annotations

from urllib.parse import quote_plus

import pytest

from ingest.s3 import rawlist

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def page(contents: str, *, head: str = "", ns: str = NS, truncated: bool = False) -> bytes:
    tail = "<IsTruncated>true</IsTruncated><NextContinuationToken>tok+/=</NextContinuationToken>"
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult {ns}><Name>b</Name>'
        f"{head}{tail if truncated else '<IsTruncated>false</IsTruncated>'}{contents}"
        "</ListBucketResult>"
    ).encode()


def item(key: str, etag: str = "&quot;abc&quot;", size: int = 5) -> str:
    return (
        f"<Contents><Key>{key}</Key><LastModified>2026-01-02T03:04:05.000Z</LastModified>"
        f"<ETag>{etag}</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
    )


HOSTILE = ["a b+c.txt", "dir/ü ñ 中文.pdf", "x&y<z>'\".bin", "tab\there", "../up", "100%/a"]


def test_url_encoded_keys_decode_as_botocore_does() -> None:
    # S3 encodes a space as "+" and "+" as "%2B" (botocore decodes with unquote_plus).
    body = page(
        "".join(item(quote_plus(k, safe="/")) for k in HOSTILE),
        head="<EncodingType>url</EncodingType>",
    )
    plain, tree = rawlist._parse_plain(body), rawlist._parse_tree(body)
    assert plain is not None and tree is not None
    assert plain.keys == HOSTILE
    assert plain == tree
    assert plain.etags == ["abc"] * len(HOSTILE)
    assert plain.sizes == [5] * len(HOSTILE)
    assert plain.modified == ["2026-01-02T03:04:05.000Z"] * len(HOSTILE)


def test_xml_escaped_keys_without_url_encoding() -> None:
    escaped = ["x&amp;y&lt;z&gt;", "cr&#13;lf&#xA;", "plain+plus"]
    body = page("".join(item(k) for k in escaped))
    plain = rawlist._parse_plain(body)
    assert plain is not None
    assert plain.keys == ["x&y<z>", "cr\rlf\n", "plain+plus"]
    assert plain == rawlist._parse_tree(body)


def test_continuation_token() -> None:
    body = page(item("k"), truncated=True)
    plain = rawlist.parse_page(body)
    assert plain is not None and plain.next_token == "tok+/="
    assert plain == rawlist._parse_tree(body)
    # truncated without a token: neither reader pretends to know the next page
    no_token = body.replace(b"<NextContinuationToken>tok+/=</NextContinuationToken>", b"")
    assert rawlist.parse_page(no_token) is None


@pytest.mark.parametrize(
    "body",
    [
        page(item("a") + "<Contents><Key>b</Key><Size>1</Size></Contents>"),  # no ETag
        page(item("<![CDATA[c]]>")),  # CDATA
        page(
            item("a")
            .replace("<Contents>", "<s3:Contents>")
            .replace("</Contents>", "</s3:Contents>"),
            ns='xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/"',
        ),
    ],
    ids=["missing-field", "cdata", "prefixed"],
)
def test_odd_pages_are_left_to_elementtree(body: bytes) -> None:
    assert rawlist._parse_plain(body) is None
    assert rawlist.parse_page(body) == rawlist._parse_tree(body)


def test_not_a_listing() -> None:
    # an error document answered with 200 is not an empty last page
    assert rawlist.parse_page(b"<Error><Code>SlowDown</Code></Error>") is None
    assert rawlist.parse_page(b"not xml at all") is None
