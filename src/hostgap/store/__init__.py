"""Where runs live: run directories written atomically (:mod:`.rundir`), their environment
manifest (:mod:`.manifest`) and the runs database (:mod:`.database`)."""
