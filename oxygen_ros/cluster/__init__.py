"""The commands' ``--ray``: Ray tasks on a cluster (`tasks`, imports Ray) and their command-line options
(`args`, imports nothing of Ray)."""
