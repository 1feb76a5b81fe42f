"""The run lifecycle and where windows are scored: windows of rows in, tables out.

- `batches`: a window's batch results gathered on the device and read back once
  (`Readback`): no synchronization per batch, so the host prepares batch n+1 while n runs.
This package knows nothing about tokenization, kinds or attention kernels.
"""
