"""An NCCL-semantics fleet simulator that writes Flight Recorder dumps."""
