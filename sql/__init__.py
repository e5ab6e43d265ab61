"""The pgcdc SQL (install list in install.txt), shipped with the package as pgcdc.sql."""
