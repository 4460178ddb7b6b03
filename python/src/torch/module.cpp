// hcomm._torch_backend: the Python face of BackendHcomm (hcomm/torch.py
// registers it with torch.distributed).
#include "backend.hpp"

#include <pybind11/chrono.h>

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace hcomm_torch;
  capi = static_cast<const hcpy_capi_t*>(PyCapsule_Import(HCPY_CAPI_NAME, 0));
  if (!capi) throw py::error_already_set();
  if (capi->version != HCPY_CAPI_VERSION) throw std::runtime_error("hcomm._hcomm and hcomm._torch_backend differ");
  py::module::import("torch.distributed");
  m.attr("TORCH_BUILT_WITH") = py::make_tuple(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);

  py::class_<Options, c10d::Backend::Options, c10::intrusive_ptr<Options>>(m, "Options", R"(
Options of an hcomm process group (init_process_group(..., pg_options=) or
new_group(..., pg_options=)): timeout (a timedelta; unset: the group's
timeout argument).)")
      .def(py::init([](std::optional<std::chrono::duration<float>> timeout) {
             ms t = timeout ? std::chrono::duration_cast<ms>(*timeout) : ms(-1);
             return c10::make_intrusive<Options>(t);
           }),
           py::arg("timeout") = py::none())
      .def_property_readonly("timeout", [](const Options& o) -> py::object {
        if (o.timeout.count() < 0) return py::none();
        return py::cast(std::chrono::duration<float>(o.timeout));
      });

  py::class_<BackendHcomm, c10d::Backend, c10::intrusive_ptr<BackendHcomm>>(m, "BackendHcomm")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const std::chrono::duration<float>& timeout, const std::string& name) {
             return c10::make_intrusive<BackendHcomm>(store, rank, size, std::chrono::duration_cast<ms>(timeout),
                                                      name);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("name") = "",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("timeout", [](const BackendHcomm& b) { return std::chrono::duration<float>(b.timeout()); })
      // fault tolerance (fault.cpp; hcomm.torch.shrink_group uses _agree_shrink)
      .def_property_readonly("failure", &BackendHcomm::failure,
                             "the group's first failure as raised (\"\" while none): later operations are "
                             "refused with it")
      .def("get_error", &BackendHcomm::getError,
           "c10d ErrorType: SUCCESS, TIMEOUT, COMM_ERROR (this rank's failure or abort), REMOTE_ERROR (a peer "
           "failed or revoked the group)")
      .def("_agree_shrink", &BackendHcomm::agree_shrink, py::call_guard<py::gil_scoped_release>(),
           "revoke this group, agree with the survivors (hcomm_comm_shrink) and keep the new communicator for "
           "shrink(); returns the group ranks that are out")
      // torch calls this on the non-members of a new group when the default
      // group is bound to a device and its backend splits (ncclCommSplit's
      // "no color"). hcomm makes a new group with the members alone
      // (hcomm_comm_create_group), so the others have nothing to do.
      .def("perform_nocolor_split", [](BackendHcomm&, const py::object&) {}, py::arg("device"));

  m.def(
      "create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::chrono::duration<float>& timeout,
         const std::string& name) -> c10::intrusive_ptr<c10d::Backend> {
        return create(store, rank, size, std::chrono::duration_cast<ms>(timeout), name);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("name") = "",
      py::call_guard<py::gil_scoped_release>(), "a group of hcomm on torch's store (hcomm.torch's creator calls it)");
}
