"""The cache, one module per part.

``root``       the cache folder (``$WORKBENCH_CACHE``), leases of running processes, stale temporary files,
               a write into the cache that fails for the folder's sake (read-only, full) as one line
``atomic``     atomic writes (a temporary file and a rename)
``kinds``      the one table of what the cache holds (a record per kind of entry)
``store``      models in the cache, each weight stored once, checked before they are handed out
``integrity``  whether a file holds what its name (its SHA-256) says, hashed once per process
``admin``      what the cache holds, per model and kind, and pruning it
"""
