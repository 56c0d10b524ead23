"""The store: one SQLite file per run directory (standard library, WAL), and every table in it.

`database` opens the file and explains what goes wrong with it; `trials` holds the trials table
and `Store`, one row per trial; `leases` the table through which sweeps sharing a store split its
trials; `fit_states` the table of what continues a finished ladder's fits. Every SQL statement
blocklab runs on a store is in these modules.
"""

from blocklab.store.database import DB_NAME, DB_SUFFIXES, damaged, explain, locate
from blocklab.store.trials import FINISHED, REUSE, Store

__all__ = ["DB_NAME", "DB_SUFFIXES", "FINISHED", "REUSE", "Store", "damaged", "explain", "locate"]
