"""Files wherever they live, below both the staging area and the lake's data folder: a folder or
an object-store prefix (:mod:`.folder`), the store's settings in each engine's spelling
(:mod:`.object_store`), and its outages named (:mod:`.outage`)."""
