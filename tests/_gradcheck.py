"""gradcheck for a module: gradients with respect to its input and every parameter, in float64."""

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
