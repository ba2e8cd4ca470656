import pytest

from trainer.parallel import ParallelDims, ParallelDimsError


def test_product_must_equal_world_size():
    assert ParallelDims(tp=2, pp=2, cp=1, dp=2, world_size=8).model_parallel == 4
    with pytest.raises(ParallelDimsError, match=r"tp\*pp\*cp\*dp = 2\*1\*1\*2 = 4 but the world size is 8"):
        ParallelDims(tp=2, pp=1, cp=1, dp=2, world_size=8)


def test_sizes_must_be_positive():
    with pytest.raises(ParallelDimsError, match="parallel.tp must be a positive integer"):
        ParallelDims(tp=0, pp=1, cp=1, dp=1, world_size=0)


def test_cpu_backend_runs_tensor_pipeline_and_data_parallel_but_not_context_parallel():
    ParallelDims(tp=2, pp=1, cp=1, dp=2, world_size=4).require_cpu_layout()
    ParallelDims(tp=2, pp=2, cp=1, dp=2, world_size=8).require_cpu_layout()
    with pytest.raises(ParallelDimsError, match="got cp=2: megatron-core's context-parallel attention needs "
                                                "Transformer Engine"):
        ParallelDims(tp=1, pp=1, cp=2, dp=1, world_size=2).require_cpu_layout()


def test_pipeline_stages_hold_equal_numbers_of_layers():
    ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2).require_model_split(4)
    with pytest.raises(ParallelDimsError, match="model.num_layers=3 does not split evenly over parallel.pp=2"):
        ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2).require_model_split(3)


def test_a_bad_layout_is_a_config_error_the_command_line_reports():
    from conf import ConfigError
    assert issubclass(ParallelDimsError, ConfigError)


def test_the_cuda_engine_runs_tensor_pipeline_and_data_parallel_and_refuses_what_it_cannot():
    """Checked before megatron's process groups are set up (trainer/gpu.py's `require_cuda_layout`), so it runs on
    a CPU: the layouts the cuda engine trains pass; the others fail with a message that names the setting."""
    from conftest import tiny_config
    from conf import ConfigError
    from trainer.gpu import require_cuda_layout

    sharded = tiny_config("schedule.checkpoint_format=sharded", "model.num_layers=8")
    for tp, pp, dp in ((2, 2, 2), (8, 1, 1), (1, 2, 4), (1, 1, 8), (1, 4, 1)):
        require_cuda_layout(sharded, ParallelDims(tp=tp, pp=pp, cp=1, dp=dp, world_size=tp * pp * dp))
    with pytest.raises(ParallelDimsError, match="parallel.cp=2: context parallelism needs Transformer Engine"):
        require_cuda_layout(sharded, ParallelDims(tp=1, pp=1, cp=2, dp=1, world_size=2))
    # the interleaved schedule: 16 / 8 = 2 micro-batches per step, a whole group of pp=2, not of pp=4
    require_cuda_layout(sharded, ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2, vp=2))
    with pytest.raises(ParallelDimsError, match="micro-batches per step and data-parallel rank, .* = 2, to be a "
                                                "multiple of parallel.pp=4"):
        require_cuda_layout(sharded, ParallelDims(tp=1, pp=4, cp=1, dp=1, world_size=4, vp=2))
    layers = sharded.model.num_layers
    with pytest.raises(ParallelDimsError, match=f"model.num_layers={layers} does not split evenly"):
        require_cuda_layout(sharded, ParallelDims(tp=1, pp=layers + 1, cp=1, dp=1, world_size=layers + 1))
    gathered = tiny_config("schedule.checkpoint_format=gathered")
    require_cuda_layout(gathered, ParallelDims(tp=1, pp=1, cp=1, dp=4, world_size=4))   # dp alone gathers whole
    with pytest.raises(ConfigError, match="checkpoint_format=gathered at tp=2 pp=1: the distributed optimizer's "
                                          "gathered state holds one model-parallel rank's share"):
        require_cuda_layout(gathered, ParallelDims(tp=2, pp=1, cp=1, dp=1, world_size=2))
