"""The megatron-core (0.16.1) patches the trainer needs without Transformer Engine or Apex, each one
named, applied for the length of a context and removed after it.

Each patch replaces one module attribute; `Patch.needed()` says whether the installed megatron
still has the behaviour it works around, and the tests assert it does, so the test fails when an
upgrade makes a patch unnecessary.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


@dataclass(frozen=True)
class Patch:
    name: str
    module: str          # dotted module path
    attribute: str       # attribute replaced on that module (a function, or "Class.method")
    replacement: Callable[..., Any]
    why: str

    def _owner_and_name(self) -> tuple[Any, str]:
        owner: Any = importlib.import_module(self.module)
        *path, name = self.attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        return owner, name

    def current(self) -> Any:
        owner, name = self._owner_and_name()
        return getattr(owner, name)


@contextlib.contextmanager
def applied(patches: tuple[Patch, ...]) -> Iterator[None]:
    """Install the patches, restore every original on exit (also after an error)."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for patch in patches:
            owner, name = patch._owner_and_name()
            saved.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, patch.replacement)
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


# --- the replacements ---------------------------------------------------------------------------

def foreach_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
    """amp_C.multi_tensor_l2norm's contract with torch's multi-tensor kernels: (norm as a 1-element tensor, None)."""
    tensors = tensor_lists[0]
    if not tensors:
        return torch.zeros(1, dtype=torch.float32, device=noop_flag.device), None
    norms = torch._foreach_norm(tensors, 2.0)
    return torch.linalg.vector_norm(torch.stack(norms).float()).reshape(1), None


def foreach_scale(chunk_size, noop_flag, tensor_lists, scale):
    """amp_C.multi_tensor_scale's contract (dst = src * scale) in one or two multi-tensor kernels."""
    src, dst = tensor_lists
    if scale == 1.0:
        torch._foreach_copy_(dst, src)
    elif all(a is b for a, b in zip(src, dst)):
        torch._foreach_mul_(dst, scale)
    else:
        torch._foreach_copy_(dst, torch._foreach_mul(src, scale))


# Tensors below this size keep torch's add: their bytes are negligible, and each compiled call costs host time.
COMPILED_ACCUMULATION_MIN = 1 << 20


@functools.cache
def _compiled_add() -> Callable[[torch.Tensor, torch.Tensor], None]:
    def add(main_grad: torch.Tensor, grad: torch.Tensor) -> None:
        main_grad.add_(grad)
    # static shapes: a model has a handful of large weight sizes, one kernel each, vectorised
    return torch.compile(add, dynamic=False, fullgraph=True)


def accumulate_grad(main_grad: torch.Tensor, grad: torch.Tensor) -> None:
    """main_grad += grad, an fp32 buffer and a bf16 gradient: torch runs that mixed-dtype add as an unrolled,
    unvectorised kernel, well under the memory bandwidth; the compiled one (a Triton kernel) reads and writes
    at it.  Small or non-contiguous tensors keep torch's add."""
    if grad.numel() >= COMPILED_ACCUMULATION_MIN and main_grad.is_contiguous() and grad.is_contiguous():
        _compiled_add()(main_grad.view(-1), grad.view(-1))
    else:
        main_grad.add_(grad)


def _original_backward_post_hook():
    from megatron.core.distributed.distributed_data_parallel import DistributedDataParallel
    return DistributedDataParallel.__dict__["_make_backward_post_hook"]


_MAKE_BACKWARD_POST_HOOK = _original_backward_post_hook()   # read at import, before any patch replaces it


def compiled_backward_post_hook(self, param: torch.nn.Parameter):
    """megatron DDP's backward hook for `param` (which adds its gradient into the fp32 main gradient, clears it and
    tells the bucket it is ready), with the add done by `accumulate_grad`: megatron's own hook then finds the
    gradient already added (`grad_added_to_main_grad`, its flag for fused weight-gradient GEMMs) and does the rest."""
    megatrons = _MAKE_BACKWARD_POST_HOOK(self, param)

    def hook(*unused):
        ours = (param in self.param_to_bucket_group and param.grad is not None
                and not param.grad_added_to_main_grad and not getattr(param, "zero_out_wgrad", False))
        if not ours:
            return megatrons(*unused)
        accumulate_grad(param.main_grad, param.grad.data)
        param.grad_added_to_main_grad = True
        try:
            return megatrons(*unused)
        finally:
            param.grad_added_to_main_grad = False

    return hook


def _tp_group_or_default(tp_group, is_expert=False, check_initialized=True):
    """megatron.core.utils.get_tensor_model_parallel_group_if_none, less its per-call warning."""
    from megatron.core import parallel_state
    if not torch.distributed.is_initialized():
        return None
    if tp_group is not None or not parallel_state.is_initialized():
        return tp_group
    if is_expert:
        return parallel_state.get_expert_tensor_parallel_group(check_initialized=check_initialized)
    return parallel_state.get_tensor_model_parallel_group(check_initialized=check_initialized)


def cpu_get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
    """GlobalMemoryBuffer.get_tensor's caching, on the CPU."""
    required = functools.reduce(operator.mul, tensor_shape, 1)
    buffer = self.buffer.get((name, dtype))
    if buffer is None or buffer.numel() < required:
        buffer = self.buffer[(name, dtype)] = torch.empty(required, dtype=dtype, device="cpu")
    return buffer[:required].view(*tensor_shape)


def cpu_default_causal_mask(sq: int) -> torch.Tensor:
    """fused_softmax.get_default_causal_mask's upper-triangular mask, on the CPU."""
    return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)


def cpu_rope_get_emb(self, max_seq_len: int, offset: int = 0) -> torch.Tensor:
    """RotaryEmbedding.get_emb (non-interleaved and interleaved) with inv_freq left on its device."""
    freqs = self.get_freqs_non_repeated(max_seq_len, offset)
    if not self.rotary_interleaved:
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = torch.stack((freqs.view(-1, 1), freqs.view(-1, 1)), dim=-1).view(freqs.shape[0], -1)
    return emb[:, None, None, :]


class _CpuCuda:
    """torch.cuda as one megatron module sees it on the cpu backend: its current device is the CPU and there
    is nothing to synchronise; anything else is torch.cuda's own."""

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def synchronize(device=None) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class CpuDeviceTorch:
    """The `torch` module as megatron's pipeline modules see it on the cpu backend: `torch.cuda.current_device()`
    is the CPU and a `device="cuda"` factory call allocates on the CPU; everything else is torch itself.
    Installed as the module attribute `torch` of p2p_communication and schedules only, so no other code moves."""

    cuda = _CpuCuda()

    @staticmethod
    def zeros(*size, device=None, **kwargs) -> torch.Tensor:
        on_cuda = device is not None and torch.device(device).type == "cuda"
        return torch.zeros(*size, device="cpu" if on_cuda else device, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


CPU_DEVICE_TORCH = CpuDeviceTorch()


class _CudaCopiesStayOnCpu(torch.overrides.TorchFunctionMode):
    """`tensor.cuda()` returns the tensor itself (torch's function-mode hook: only for the calls made inside)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.cuda:
            return args[0]
        return func(*args, **(kwargs or {}))


class _MachineDistributed:
    """torch.distributed, but `get_rank()` is the rank within this machine (torchrun's LOCAL_RANK)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.distributed, name)

    @staticmethod
    def get_rank(group=None) -> int:
        return int(os.environ.get("LOCAL_RANK", "0"))


class MachineRankTorch:
    """`torch` as megatron's dataset modules see it when each machine has an index cache of its own: their
    "rank 0 builds and caches, the others read the cache after a barrier" runs per machine."""
    distributed = _MachineDistributed()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


MACHINE_RANK_TORCH = MachineRankTorch()


def _original_setup_embeddings():
    from megatron.core.models.common.language_module.language_module import LanguageModule
    return LanguageModule.__dict__["setup_embeddings_and_output_layer"]


_SETUP_EMBEDDINGS = _original_setup_embeddings()


def cpu_setup_embeddings_and_output_layer(self) -> None:
    """LanguageModule.setup_embeddings_and_output_layer as shipped, its `weight.data.cuda()` (before the
    all-reduce that copies the tied embedding to the last pipeline stage) kept on the CPU."""
    with _CudaCopiesStayOnCpu():
        return _SETUP_EMBEDDINGS(self)


# The cpu backend's: megatron-core assumes CUDA where the forward and backward pass touch even at tp=pp=1
# (upstream is removing these: NVIDIA/Megatron-LM PR #6270).
CPU_SCRATCH_BUFFER = Patch(
    "cpu_scratch_buffer", "megatron.core.utils", "GlobalMemoryBuffer.get_tensor", cpu_get_tensor,
    "GlobalMemoryBuffer allocates the linear layers' scratch space on torch.cuda.current_device()")
CPU_CAUSAL_MASK = Patch(
    "cpu_causal_mask", "megatron.core.fusions.fused_softmax", "get_default_causal_mask", cpu_default_causal_mask,
    "the unfused softmax builds its default causal mask with device='cuda'")
CPU_ROPE = Patch(
    "cpu_rope", "megatron.core.models.common.embeddings.rotary_pos_embedding", "RotaryEmbedding.get_emb",
    cpu_rope_get_emb, "RotaryEmbedding.get_emb moves inv_freq to torch.cuda.current_device()")
CPU_PATCHES = (CPU_SCRATCH_BUFFER, CPU_CAUSAL_MASK, CPU_ROPE)

# The cpu backend's for pipeline parallelism (pp > 1): megatron's 1F1B schedule and its point-to-point layer
# allocate the activations they receive and their token counter on CUDA, and the last stage's copy of a tied
# embedding is moved to CUDA before the all-reduce that initialises it.
CPU_P2P_BUFFERS = Patch(
    "cpu_p2p_buffers", "megatron.core.pipeline_parallel.p2p_communication", "torch", CPU_DEVICE_TORCH,
    "P2PCommunicator allocates its receive buffers on torch.cuda.current_device()")
CPU_SCHEDULE_TOKENS = Patch(
    "cpu_schedule_tokens", "megatron.core.pipeline_parallel.schedules", "torch", CPU_DEVICE_TORCH,
    "the pipeline schedules count tokens in torch.zeros(..., device=\"cuda\")")
CPU_TIED_EMBEDDING = Patch(
    "cpu_tied_embedding", "megatron.core.models.common.language_module.language_module",
    "LanguageModule.setup_embeddings_and_output_layer", cpu_setup_embeddings_and_output_layer,
    "the last stage's tied output weight is moved with .cuda() before its initialising all-reduce")
CPU_PIPELINE_PATCHES = (CPU_P2P_BUFFERS, CPU_SCHEDULE_TOKENS, CPU_TIED_EMBEDDING)

# megatron's local fallbacks for Apex's multi-tensor kernels: the l2 norm calls torch.norm once per tensor
# and then torch.tensor() on the list, a host-device sync per parameter (≈300 at 1 B) every step, and the
# scale is a Python loop of copies.
FOREACH_L2_NORM = Patch(
    "foreach_l2_norm", "megatron.core.optimizer.clip_grads", "l2_norm_impl", foreach_l2_norm,
    "megatron's local multi_tensor_l2norm syncs the host once per gradient tensor")
FOREACH_SCALE_CLIP = Patch(
    "foreach_scale_clip", "megatron.core.optimizer.clip_grads", "multi_tensor_scale_impl", foreach_scale,
    "megatron's local multi_tensor_scale is a Python loop of per-tensor copies")
FOREACH_SCALE_COPY = Patch(
    "foreach_scale_copy", "megatron.core.optimizer.optimizer", "multi_tensor_scale_impl", foreach_scale,
    "megatron's local multi_tensor_scale is a Python loop of per-tensor copies")
# RowParallelLinear.forward calls linear_with_grad_accumulation_and_async_allreduce with tp_group=None,
# which then warns (DeprecationWarning) on every call; torch.compile cannot trace warnings.warn with
# keyword arguments, so every transformer layer broke into several graphs.
ROW_PARALLEL_TP_GROUP = Patch(
    "row_parallel_tp_group", "megatron.core.tensor_parallel.layers", "get_tensor_model_parallel_group_if_none",
    _tp_group_or_default,
    "RowParallelLinear passes no tp_group and megatron warns on every call, a torch.compile graph break")

# megatron builds a dataset's index arrays (document, sample and shuffle indices; a blend's indices) on global rank 0,
# caches them in path_to_cache, and has every other rank read that cache after a barrier: a cache that is not one
# shared folder (each machine stages its own, trainer/run_folder.py) needs each machine's first rank to build it.
MACHINE_CACHE_PATCHES = tuple(
    Patch(f"machine_cache_{short}", f"megatron.core.datasets.{module}", "torch", MACHINE_RANK_TORCH,
          f"{what} builds its indices on global rank 0 only; the other ranks read its cache after a barrier")
    for short, module, what in (("builder", "blended_megatron_dataset_builder", "BlendedMegatronDatasetBuilder"),
                                ("gpt", "gpt_dataset", "GPTDataset"), ("blend", "blended_dataset", "BlendedDataset")))

COMPILED_ACCUMULATION = Patch(
    "compiled_grad_accumulation", "megatron.core.distributed.distributed_data_parallel",
    "DistributedDataParallel._make_backward_post_hook", compiled_backward_post_hook,
    "megatron's DDP hook adds each bf16 gradient into its fp32 main gradient with torch's mixed-dtype add (without "
    "Apex or TE's fused weight-gradient GEMM), an unvectorised kernel: 46 ms of a 1.06 s step at 1.3 B on an H200")

OPTIMIZER_PATCHES = (FOREACH_L2_NORM, FOREACH_SCALE_CLIP, FOREACH_SCALE_COPY)
ACCUMULATION_PATCHES = (COMPILED_ACCUMULATION,)
COMPILE_PATCHES = (ROW_PARALLEL_TP_GROUP,)


def still_needed(patch: Patch) -> bool:
    """Whether the installed megatron-core still has the behaviour `patch` works around."""
    from megatron.core import utils as mcore_utils
    if patch in OPTIMIZER_PATCHES:
        name = "local_multi_tensor_l2_norm" if patch is FOREACH_L2_NORM else "local_multi_tensor_scale"
        return patch.current() is getattr(mcore_utils, name, object())
    if patch is COMPILED_ACCUMULATION:
        return "param.main_grad.add_(param.grad.data)" in inspect.getsource(_MAKE_BACKWARD_POST_HOOK)
    if patch is ROW_PARALLEL_TP_GROUP:
        from megatron.core.tensor_parallel import layers
        source = inspect.getsource(layers.RowParallelLinear.forward)
        call = source[source.index("self._forward_impl("):]
        call = call[:call.index(")\n")]
        return "tp_group=None" in call or "tp_group=" not in call
    if patch in (CPU_P2P_BUFFERS, CPU_SCHEDULE_TOKENS):
        source = inspect.getsource(importlib.import_module(patch.module))
        return "torch.cuda.current_device()" in source or 'device="cuda"' in source
    if patch in MACHINE_CACHE_PATCHES:
        return "torch.distributed.get_rank()" in inspect.getsource(importlib.import_module(patch.module))
    if patch is CPU_TIED_EMBEDDING:
        return ".cuda()" in inspect.getsource(_SETUP_EMBEDDINGS)
    if patch in CPU_PATCHES:
        source = inspect.getsource(patch.current())
        return "torch.cuda.current_device()" in source or 'device="cuda"' in source
    raise KeyError(patch.name)
