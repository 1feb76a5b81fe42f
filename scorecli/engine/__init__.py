"""The run lifecycle (windows -> scorer -> sink, checkpoint, progress, summary) and the places
windows are scored.

- `run`: a `scorecli score` run in this process: rows, the Scorer, the sink or the checkpoint,
  progress and the summary;
- `local`: windows through a Scorer, the next window prepared while this one runs;
- `batches`: a window's batches run back to back (halved on running out of memory, or in CPU
  streams) and their results gathered on the device and read back once (`Readback`):
  no synchronization per batch, so the host prepares batch n+1 while n runs;
- `ray`, `ray_cluster`: the same job on Ray workers;
- `checkpoint`, `job`: kept windows (`<out>.partial/`, dataset parts) and the job's fingerprint
  for `--resume`;
- `progress`: counts, the progress line and the summary.
This package knows nothing about tokenization, kinds or attention kernels.
"""
