import pytest

from trainer.parallel import ParallelDims, ParallelDimsError


def test_product_must_equal_world_size():
    assert ParallelDims(tp=2, pp=2, cp=1, dp=2, world_size=8).model_parallel == 4
    with pytest.raises(ParallelDimsError, match=r"tp\*pp\*cp\*dp = 2\*1\*1\*2 = 4 but the world size is 8"):
        ParallelDims(tp=2, pp=1, cp=1, dp=2, world_size=8)


def test_sizes_must_be_positive():
    with pytest.raises(ParallelDimsError, match="parallel.tp must be a positive integer"):
        ParallelDims(tp=0, pp=1, cp=1, dp=1, world_size=0)


def test_cpu_backend_runs_one_process_only():
    ParallelDims(1, 1, 1, 1, 1).require_single_device("cpu")
    with pytest.raises(ParallelDimsError, match="the cpu backend runs tp=pp=cp=dp=1, got tp=2"):
        ParallelDims(tp=2, pp=1, cp=1, dp=1, world_size=2).require_single_device("cpu")
