"""LEV's and the loss's Triton kernels compiled for a GPU without one, and what that shows.

Triton's interpreter (the CPU tests) proves the kernels' arithmetic; it is blind to what only
the compiled code does. This package compiles each kernel as Triton's JIT would on the GPU
(its own argument specialisation: 16-byte aligned pointers, integers divisible by 16), for
compute capability 9.0 (H100, H200) and 8.0 (A100), at the shapes the study runs, and reads:

  * `ranges`: every 32-bit integer the kernel computes on its way to an address, bounded
    from the TTIR at each planned shape (no 32-bit offset may pass 2^31);
  * `sass`: registers, spills and shared memory per program (cuobjdump), atomics (PTX),
    and the instructions the hot loop issues (SASS), which the cost models use;
  * `shapes`: the planned shapes, from the shipped study configs.

It needs a process where Triton is imported compiled, not interpreted (no
TRITON_INTERPRET), and the Triton the GPU image pins (`make venv` installs it beside the
test environment's: docs/gpu.md, "Compiled for the GPU"). `python -m leviathan.compiled`
prints the table docs/gpu.md quotes.
"""
