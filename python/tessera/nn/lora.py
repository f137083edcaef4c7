"""LoRA fine-tuning as PEFT spells it (tessera._C.nn.lora, C++ nn/lora.h):

    from tessera.nn.lora import LoraConfig, get_peft_model, save_pretrained
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["c_attn"])
    model = get_peft_model(model, config)      # in place: only lora_A / lora_B train
    ...
    save_pretrained(model, "out/adapter", config)  # adapter_config.json + .safetensors

The folder serves with `tessera serve --lora-modules name=out/adapter`, or merges into a base
model with merge_adapter(model, path).
"""
from .._C.nn.lora import (  # noqa: F401
    LoraConfig,
    get_peft_model,
    load_adapter,
    lora_state_dict,
    merge_adapter,
    save_pretrained,
)
