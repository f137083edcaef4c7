"""tessera.nn.lora (PEFT's LoraConfig / get_peft_model / save_pretrained): the branches of a
Python model against torch computing the same low-rank update by hand (outputs and gradients),
only the branches training, and a saved adapter merged into a fresh base giving the trained
model's outputs."""
import numpy as np
import pytest
import torch

import tessera
from tessera.nn import functional as F
from tessera.nn.lora import (LoraConfig, get_peft_model, load_adapter, lora_state_dict,
                             merge_adapter, save_pretrained)
from optable import to_torch


class Net(tessera.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = tessera.nn.Linear(8, 16)
        self.fc2 = tessera.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def net(seed=0):
    tessera.manual_seed(seed)
    return Net()


def test_branches_match_torch_and_only_they_train():
    model = net()
    config = LoraConfig(r=2, lora_alpha=6.0, target_modules=["fc1"])
    assert config.scaling == 3.0 and config.target_modules == ["fc1"]
    x_np = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    x = tessera.from_numpy(x_np.copy())
    before = to_torch(model(x)).clone()
    assert get_peft_model(model, config) is model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["fc1.lora_A.weight", "fc1.lora_B.weight"]
    torch.testing.assert_close(to_torch(model(x)), before)  # lora_B starts at zero
    with tessera.no_grad():
        model.fc1.lora_B.weight.copy_(tessera.from_numpy(
            np.random.default_rng(1).standard_normal((16, 2)).astype(np.float32)))
    w = {n: to_torch(p).clone().requires_grad_(p.requires_grad)
         for n, p in model.named_parameters()}
    xt = torch.from_numpy(x_np)
    h = xt @ w["fc1.weight"].T + w["fc1.bias"] + 3.0 * (xt @ w["fc1.lora_A.weight"].T) @ \
        w["fc1.lora_B.weight"].T
    want = torch.relu(h) @ w["fc2.weight"].T + w["fc2.bias"]
    out = model(x)
    torch.testing.assert_close(to_torch(out), want.detach(), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    want.sum().backward()
    params = dict(model.named_parameters())
    for name in trainable:
        torch.testing.assert_close(to_torch(params[name].grad), w[name].grad, rtol=1e-5,
                                   atol=1e-5)
    assert params["fc1.weight"].grad is None


def test_trained_adapter_saves_and_merges_into_a_fresh_base(tmp_path):
    model = net()
    config = LoraConfig(r=4, lora_alpha=8.0, target_modules="fc[12]")  # a regular expression
    get_peft_model(model, config)
    base = {n: to_torch(p).clone() for n, p in model.named_parameters() if "lora_" not in n}
    opt = tessera.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    rng = np.random.default_rng(2)
    x = tessera.from_numpy(rng.standard_normal((32, 8)).astype(np.float32))
    y = tessera.from_numpy(rng.standard_normal((32, 4)).astype(np.float32))
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    for n, p in model.named_parameters():
        if "lora_" not in n:
            torch.testing.assert_close(to_torch(p), base[n])  # frozen
    save_pretrained(model, str(tmp_path), config)
    loaded_config, weights = load_adapter(str(tmp_path))
    assert loaded_config.r == 4 and loaded_config.target_modules == "fc[12]"
    assert sorted(weights) == sorted(lora_state_dict(model))
    fresh = net()
    merge_adapter(fresh, str(tmp_path))
    torch.testing.assert_close(to_torch(fresh(x)), to_torch(model(x)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="expected target_modules naming some"):
        get_peft_model(net(), LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="adapter_config.json"):
        merge_adapter(net(), str(tmp_path / "missing"))
