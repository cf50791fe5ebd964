"""Tools for the repository itself (the docs' generated pages); not part of the wheel."""
