"""An unchanged training script whose last rank skips one all_reduce (the README's
example): its peers time out in the next one, and every rank's buffer is flushed under one
incident by ``fr-otel run``."""

import datetime
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
x = torch.ones(64)
for _step in range(5):
    dist.all_reduce(x)
if int(os.environ["RANK"]) != int(os.environ["WORLD_SIZE"]) - 1:
    dist.all_reduce(x)  # the last rank skips this one
dist.all_reduce(x)
