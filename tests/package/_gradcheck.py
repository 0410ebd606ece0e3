"""gradcheck for a module: gradients with respect to its input and every parameter, in float64.

Our modules are plain PyTorch, whose autograd PyTorch tests itself: one smoke test uses this
(tests/package/test_multihead.py::test_gradcheck_float64). The backward we wrote by hand, that of
flash_attention, has its own gradchecks in tests/package/test_flash.py.
"""

import torch
from torch.autograd import gradcheck
from torch.func import functional_call


def module_gradcheck(module: torch.nn.Module, x: torch.Tensor) -> bool:
    """Compare autograd's gradients with finite differences for input ``x`` and all parameters."""
    module = module.double()
    names, params = zip(*module.named_parameters())
    leaves = tuple(p.detach().requires_grad_() for p in params)

    def run(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return functional_call(module, dict(zip(names, ps)), (x,))

    return gradcheck(run, (x.double().requires_grad_(), *leaves))
