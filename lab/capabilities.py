"""What this machine's torch can do, asked the way torch itself decides: native bfloat16
instructions, and a C++ compiler for torch.compile's inductor. A point (or a search candidate)
that needs a missing one is skipped with the reason instead of measuring an emulation.
torch is imported inside the functions."""

from __future__ import annotations


def native_bf16() -> tuple[bool, str]:
    """Whether this CPU has native bfloat16 instructions, as torch's own CPU probes see it.

    Returns:
        ``(supported, what)``: ``what`` names the instruction sets found or missing, e.g.
        ``"avx512_bf16: no, amx_tile: no"``.
    """
    import torch

    probes = {"avx512_bf16": "_is_avx512_bf16_supported", "amx_tile": "_is_amx_tile_supported"}
    found = {name: bool(getattr(torch.cpu, fn, lambda: False)()) for name, fn in probes.items()}
    return any(found.values()), ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in found.items())


def cxx_compiler() -> tuple[str | None, str]:
    """Ask inductor which C++ compiler it would use: ``(path, "")`` or ``(None, reason)``.

    Uses inductor's own search (``torch._inductor.cpp_builder.get_cpp_compiler``, which honours
    ``$CXX``), so the answer matches what ``torch.compile`` will do.
    """
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return get_cpp_compiler(), ""
    except Exception as exc:  # InvalidCxxCompiler, or an import problem of inductor
        return None, f"{type(exc).__name__}: {exc}".strip()
