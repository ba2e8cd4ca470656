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
