"""Pipeline parallelism: schedules (GPipe, 1F1B, interleaved 1F1B) and the executor that runs a
step's micro-batches through this rank's model chunks, on tessera/dist/pipeline.h.

    pp = PipelineExecutor(group, "1f1b")               # stage = rank in group
    def forward(chunk, micro, x):                      # x is None on the first stage
        h = stage_module(inputs[micro] if x is None else x)
        return loss_fn(h, targets[micro]) if pp.stage == pp.stages - 1 else h
    loss_sum = pp.run(4, forward)                      # 4 micro-batches; grads of mean loss

Activations travel with their shape and dtype (a header before each tensor), so nothing about
them is configured. make_pipeline_schedule lists a stage's steps, as the executor runs them.
"""
from .._C.distributed import PipelineExecutor, make_pipeline_schedule  # noqa: F401
