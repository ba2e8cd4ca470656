"""Model FLOPs and MFU (PaLM convention), and the accelerator peaks they are measured against.

Pure functions: the trainer logs MFU with them, the GPU benchmark prints it, the run planner uses
them to predict step time.
"""
from __future__ import annotations

# Dense bf16 peaks in FLOP/s (vendor datasheets; torchtitan tools/utils.py lists the same).  Longest match
# first: "H100 PCIe" must not read as the SXM part.
BF16_PEAK = (("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12),
             ("GH200", 989e12), ("B200", 2250e12), ("A100", 312e12), ("L40S", 362e12), ("A10", 125e12))


def bf16_peak(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU named as torch.cuda.get_device_name() names it; None if unknown."""
    for key, peak in BF16_PEAK:
        if key in device_name:
            return peak
    return None


def flops_per_token(non_embedding_params: int, num_layers: int, hidden_size: int, seq_length: int) -> float:
    """Training FLOPs per token, PaLM (arXiv 2204.02311 App. B): 6N + 12·L·h·s.

    N counts the transformer's parameters, not the input embedding or the output layer; attention's
    causal half is not discounted.  So MFU here is comparable with PaLM's, nanoGPT's and the anchors'.
    """
    return 6.0 * non_embedding_params + 12.0 * num_layers * hidden_size * seq_length


def mfu(tokens_per_s: float, per_token_flops: float, peak_flops: float, n_devices: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak of the devices used."""
    return tokens_per_s * per_token_flops / (peak_flops * n_devices)
