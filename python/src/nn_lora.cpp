// tessera._C.nn.lora: LoRA fine-tuning as PEFT's LoraConfig / get_peft_model / save_pretrained
// read (nn/lora.h, io/lora_adapter.h); tessera.nn.lora re-exports it.
#include "bind.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/nn/lora.h"

namespace tessera::python {

void init_nn_lora(py::module_& nn_m) {
  py::module_ m = nn_m.def_submodule("lora", "LoRA: low-rank branches on Linear layers (PEFT).");
  py::class_<nn::LoraConfig>(m, "LoraConfig",
                             "PEFT's LoraConfig: rank r, lora_alpha (branches scale by alpha / "
                             "r, or alpha / sqrt(r) with use_rslora), lora_dropout, and "
                             "target_modules: layer names (a layer named so or ending in "
                             "'.' + name), 'all-linear', or one string matched as a regular "
                             "expression against whole names.")
      .def(py::init([](int64_t r, double lora_alpha, double lora_dropout,
                       const std::variant<std::string, std::vector<std::string>>& target_modules,
                       bool use_rslora) {
             nn::LoraConfig c;
             c.r = r;
             c.lora_alpha = lora_alpha;
             c.lora_dropout = lora_dropout;
             c.use_rslora = use_rslora;
             if (const auto* regex = std::get_if<std::string>(&target_modules))
               c.target_regex = *regex;
             else
               c.target_modules = std::get<std::vector<std::string>>(target_modules);
             return c;
           }),
           py::arg("r") = 8, py::arg("lora_alpha") = 8.0, py::arg("lora_dropout") = 0.0,
           py::arg("target_modules") = std::vector<std::string>{"all-linear"},
           py::arg("use_rslora") = false)
      .def_readwrite("r", &nn::LoraConfig::r)
      .def_readwrite("lora_alpha", &nn::LoraConfig::lora_alpha)
      .def_readwrite("lora_dropout", &nn::LoraConfig::lora_dropout)
      .def_readwrite("use_rslora", &nn::LoraConfig::use_rslora)
      .def_property_readonly("target_modules",
                             [](const nn::LoraConfig& c) -> py::object {
                               if (!c.target_regex.empty()) return py::str(c.target_regex);
                               return py::cast(c.target_modules);
                             })
      .def_property_readonly("scaling", &nn::LoraConfig::scaling)
      .def("__repr__", [](const nn::LoraConfig& c) {
        return tessera::detail::str("LoraConfig(r=", c.r, ", lora_alpha=", c.lora_alpha,
                                    ", lora_dropout=", c.lora_dropout, ", scaling=", c.scaling(),
                                    ")");
      });
  m.def(
      "get_peft_model",
      [](py::object model, const nn::LoraConfig& config) {
        nn::apply_lora(model.cast<nn::Module&>(), config);
        return model;
      },
      py::arg("model"), py::arg("config"),
      "Freezes model and adds a LoRA branch to each targeted Linear (in place); returns model. "
      "ValueError when nothing is targeted.");
  m.def(
      "lora_state_dict", [](nn::Module& model) { return tensor_dict(nn::lora_state_dict(model)); },
      py::arg("model"), "The branches' weights, '<layer>.lora_A.weight' / '.lora_B.weight'.");
  m.def(
      "save_pretrained",
      [](nn::Module& model, const std::string& path, const nn::LoraConfig& config,
         const std::string& base_model) {
        io::save_lora_adapter(path, {config, nn::lora_state_dict(model)}, base_model);
      },
      py::arg("model"), py::arg("path"), py::arg("config"), py::arg("base_model") = "",
      "Writes model's branches as a PEFT adapter folder (adapter_config.json, "
      "adapter_model.safetensors).");
  m.def(
      "load_adapter",
      [](const std::string& path) {
        nn::LoraAdapter a = io::load_lora_adapter(path);
        return py::make_tuple(a.config, tensor_dict(a.weights));
      },
      py::arg("path"), "(LoraConfig, weights) of a PEFT adapter folder.");
  m.def(
      "merge_adapter",
      [](nn::Module& model, const std::string& path) {
        nn::merge_lora(model, io::load_lora_adapter(path));
      },
      py::arg("model"), py::arg("path"),
      "Adds a PEFT adapter folder's scaling * B A to the weights of model (without branches).");
}

}  // namespace tessera::python
