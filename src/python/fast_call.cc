// _core.allreduce as a plain CPython METH_FASTCALL function. It is the call of the
// per-tensor path (one per gradient per step), and pybind11's dispatcher cost more than
// the call's own work: it tries each overload, converts nine arguments through type
// casters and keeps them in a vector (docs/benchmarks.md, call_cost.py).
#include <Python.h>

#include <climits>
#include <string>

#include "mxnet/c_api_internal.h"
#include "python/calls.h"

namespace mxhorovod {
namespace binding {
namespace {

// An int argument that must fit in a C int (priority, op, process set): TypeError for a
// non-int, OverflowError beyond 32 bits. Sets a Python error and returns false when not.
bool IntArg(PyObject* o, const char* what, int* out) {
  long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) return false;
  if (v < INT_MIN || v > INT_MAX) {
    PyErr_Format(PyExc_OverflowError, "allreduce: %s %ld does not fit in a 32-bit int", what, v);
    return false;
  }
  *out = (int)v;
  return true;
}

PyObject* Allreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "allreduce() takes 9 arguments (%zd given)", nargs);
    return nullptr;
  }
  void* in = PyLong_AsVoidPtr(args[0]);
  if (in == nullptr && PyErr_Occurred()) return nullptr;
  void* out = PyLong_AsVoidPtr(args[1]);
  if (out == nullptr && PyErr_Occurred()) return nullptr;
  Py_ssize_t len = 0;
  const char* text = PyUnicode_Check(args[2]) ? PyUnicode_AsUTF8AndSize(args[2], &len) : nullptr;
  if (text == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "allreduce: the name must be a str");
    return nullptr;
  }
  int op = 0, priority = 0, ps = 0;
  if (!IntArg(args[3], "op", &op)) return nullptr;
  const double pre = PyFloat_AsDouble(args[4]);
  if (pre == -1.0 && PyErr_Occurred()) return nullptr;
  const double post = PyFloat_AsDouble(args[5]);
  if (post == -1.0 && PyErr_Occurred()) return nullptr;
  if (!IntArg(args[6], "priority", &priority) || !IntArg(args[7], "process set", &ps)) return nullptr;
  const int settle = PyObject_IsTrue(args[8]);
  if (settle < 0) return nullptr;
  const std::string name(text, (size_t)len);
  try {
    int rc = 0;
    Status s;
    {
      pybind11::gil_scoped_release nogil;
      if (settle) s = Settle(in, false);
      const std::string why = UnreadableInput(s);
      rc = mx::Call(OpType::kAllreduce, &in, &out, 1, &name, op, pre, post, priority, ps,
                    s.ok() ? nullptr : &why);
    }
    Raise(s);
    Check(rc);
  } catch (pybind11::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (...) {
    pybind11::detail::try_translate_exceptions();
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef kAllreduce = {
    "allreduce", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&Allreduce)),
    METH_FASTCALL,
    "allreduce(in, out, name, op, prescale, postscale, priority, process_set, settle): one "
    "allreduce pushed into MXNet's engine (in == out: in place). Internal: the checks are "
    "mxhorovod.collectives.submit's."};

}  // namespace

void AddFastAllreduce(pybind11::module_& m) {
  PyObject* f = PyCFunction_NewEx(&kAllreduce, nullptr, m.attr("__name__").ptr());
  if (f == nullptr) throw pybind11::error_already_set();
  m.attr("allreduce") = pybind11::reinterpret_steal<pybind11::object>(f);
}

}  // namespace binding
}  // namespace mxhorovod
