// The Python module switchml_torch._C: exposes ProcessGroupSwitchML as a
// subclass of torch.distributed.ProcessGroup.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "process_group.h"
#include "switchml/version.h"

namespace py = pybind11;
using switchml::torch_backend::ProcessGroupSwitchML;

PYBIND11_MODULE(_C, m) {
  py::module::import("torch.distributed");  // registers the c10d base classes
  m.attr("__version__") = SWITCHML_VERSION;
  py::class_<ProcessGroupSwitchML, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupSwitchML>>(
      m, "ProcessGroupSwitchML")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds,
                    c10::intrusive_ptr<c10d::ProcessGroup>>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("fallback"), py::call_guard<py::gil_scoped_release>())
      .def("settings_toml", &ProcessGroupSwitchML::SettingsToml,
           "The switchml settings in effect, as TOML")
      .def("counters", &ProcessGroupSwitchML::Counters, "The protocol counters of this rank");
}
