"""The PostgreSQL side of the data path: connections, capture (install, attach, the triggers'
SQL), the commit queue and batch planning, the rows a batch or a copy reads, columns and how
each type travels, what a reading session checks, consumers and their state's mirror.

Nothing here touches Delta: `pgcdc.lake` is the other side, and `pgcdc.sync` joins them.
"""
