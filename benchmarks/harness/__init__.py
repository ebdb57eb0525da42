"""What every benchmark shares: one way to start, probe and stop a server and read its CPU time
(:mod:`.process`), one load driver (:mod:`.load`) and capacity beside one-client latency on it
(:mod:`.capacity`), timing helpers and alternating rounds
(:mod:`.timing`), host facts and load average (:mod:`.host`), the results page with its metadata
header (:mod:`.report`) and the argparse parents (:mod:`.cli`)."""
