"""Recorded turns inside the agent: which turns are recorded or shadowed and how they are
written (recorder), one run's model exchanges and tool calls as its recording (capture), a
recorded turn run again with its tools answered from the recording (rerun), shadow
variants' copies of live turns (shadow), and the judge model of replayed answers (judge).
The recording format itself is ``sidecar.recording``."""
