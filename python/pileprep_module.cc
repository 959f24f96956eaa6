// pileprep._pileprep: Python bindings of the loader (include/pileprep/loader.h). Errors become
// Python exceptions here, at the edge: a failed system call (ErrnoOf) -> OSError(errno, message),
// which Python makes FileNotFoundError, PermissionError, NotADirectoryError, ... by its errno (what
// numpy.memmap, open or os.makedirs raise in Megatron's loader), but MemoryError for ENOMEM;
// otherwise OutOfRange -> IndexError, NotFound -> FileNotFoundError, PermissionDenied ->
// PermissionError, InvalidArgument -> ValueError, ResourceExhausted -> MemoryError when memory ran
// out, else OSError, anything else -> RuntimeError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "pileprep/indexed_dataset_view.h"
#include "pileprep/loader.h"

namespace py = pybind11;

namespace pileprep {
namespace {

// `m` as a Python str, read as UTF-8 with bad bytes replaced (a path in it need not be UTF-8;
// PyErr_SetString would leave the message empty). A new reference.
PyObject* Message(const std::string& m) {
  PyObject* message = PyUnicode_DecodeUTF8(m.data(), static_cast<py::ssize_t>(m.size()), "replace");
  if (message == nullptr) throw py::error_already_set();
  return message;
}

// Sets a Python error of `type` whose message is `m`.
[[noreturn]] void Throw(PyObject* type, const std::string& m) {
  PyObject* message = Message(m);
  PyErr_SetObject(type, message);
  Py_DECREF(message);
  throw py::error_already_set();
}

[[noreturn]] void Raise(const absl::Status& s) {
  const std::string m(s.message());
  // A failed system call: OSError(errno, message), which Python makes the errno's subclass
  // (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, ...) with .errno
  // set, as Megatron's open() and numpy.memmap raise. Out of memory stays MemoryError.
  if (const std::optional<int> err = ErrnoOf(s); err && *err != ENOMEM) {
    PyObject* e = PyObject_CallFunction(PyExc_OSError, "iN", *err, Message(m));
    if (e == nullptr) throw py::error_already_set();
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e)), e);
    Py_DECREF(e);
    throw py::error_already_set();
  }
  switch (s.code()) {
    case absl::StatusCode::kOutOfRange:
      Throw(PyExc_IndexError, m);
    case absl::StatusCode::kNotFound:
      Throw(PyExc_FileNotFoundError, m);
    case absl::StatusCode::kPermissionDenied:
      Throw(PyExc_PermissionError, m);
    case absl::StatusCode::kInvalidArgument:
      Throw(PyExc_ValueError, m);
    case absl::StatusCode::kResourceExhausted:
      // The loader's out-of-memory statuses say so; ENOSPC and EDQUOT share the code (npy.cc).
      Throw(absl::StrContains(m, "out of memory") || absl::StrContains(m, "Cannot allocate")
                ? PyExc_MemoryError
                : PyExc_OSError,
            m);
    default:
      Throw(PyExc_RuntimeError, m);
  }
}

// The C++ state of `self`, or TypeError where it has none: an instance made with
// cls.__new__(cls) and no __init__ (pybind11 would hand out uninitialised storage).
template <typename T>
const T& Self(py::handle self) {
  // `self` is taken untyped (a method called through the class may be handed anything):
  // checked first, as pybind11 would have for a typed argument.
  if (!py::isinstance(self, py::type::of<T>())) {
    throw py::type_error(
        absl::StrCat("expected a ", py::str(py::type::of<T>().attr("__name__")).cast<std::string>(),
                     ", got ", py::str(self.get_type().attr("__name__")).cast<std::string>()));
  }
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  py::detail::value_and_holder v =
      inst->get_value_and_holder(py::detail::get_type_info(typeid(T)), /*throw_if_missing=*/false);
  if (!v || !v.holder_constructed()) {
    throw py::type_error(absl::StrCat(py::str(self.get_type().attr("__name__")).cast<std::string>(),
                                      ": __init__ was not called"));
  }
  return *v.value_ptr<T>();
}

int64_t Normalize(int64_t i, int64_t n) {
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw py::index_error("index out of range");
  return i;
}

// A read-only numpy view of items of type T at `data` (aligned or not: numpy reads either), kept
// alive by `owner`.
template <typename T>
py::array View(const void* data, std::vector<py::ssize_t> shape, py::handle owner) {
  py::array a(py::dtype::of<T>(), shape, {}, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

template <typename To, typename From>
py::array Narrowed(const std::vector<From>& v, std::vector<py::ssize_t> shape) {
  py::array_t<To> a(shape);
  To* out = a.mutable_data();
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<To>(v[i]);
  return a;
}

// A read-only numpy view of an index array in its own dtype (Megatron's), kept alive by `owner`:
// no copy, so a cached index stays the shared mapping it is in C++.
py::array View(const IndexArray& a, std::vector<py::ssize_t> shape, py::handle owner) {
  return a.Visit([&](const auto* values) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(values)>>;
    return View<T>(values, std::move(shape), owner);
  });
}

struct PyIndexedDataset {
  std::shared_ptr<const IndexedDatasetView> view;
};

struct PyGptDataset {
  std::unique_ptr<GptDataset> ds;
  int64_t seq_length = 0;
  // The constructor's arguments, for pickling: a DataLoader's spawned workers open the dataset
  // again from them (the same indices: from the cache, or built again alike).
  py::tuple args;
  const GptIndices& Single() const {
    if (ds->is_blend()) {
      throw py::value_error(
          "a blend has one set of indices per dataset: use dataset_index / dataset_sample_index");
    }
    return ds->indices(0);
  }
};

// Open checks every sequence of the .idx (a pass over gigabytes for The Pile): other Python
// threads (a DataLoader's, a training loop's) run meanwhile. Nothing Python is touched while
// released: `prefix` is a C++ copy.
PyIndexedDataset OpenIndexedDataset(const std::string& prefix) {
  absl::StatusOr<std::shared_ptr<const IndexedDatasetView>> v;
  {
    py::gil_scoped_release release;
    v = IndexedDatasetView::Open(prefix);
  }
  if (!v.ok()) Raise(v.status());
  return PyIndexedDataset{*std::move(v)};
}

// __reduce__ of a dataset made from `args`: a call to its class with them. A Python subclass is
// made through pileprep._rebuild (python/pileprep/__init__.py) instead, which calls the pileprep
// class's __init__ with them (a subclass's own __init__ may take other arguments) and restores the
// instance's __dict__ (the attributes it set, which a spawned DataLoader worker got without).
py::tuple Reduce(py::handle self, const py::tuple& args) {
  py::object cls = py::reinterpret_borrow<py::object>(self.get_type());
  py::object base = cls;
  for (py::handle b : cls.attr("__mro__")) {  // the pileprep class it derives from
    if (py::hasattr(b, "__module__") &&
        b.attr("__module__").cast<std::string>() == "pileprep._pileprep") {
      base = py::reinterpret_borrow<py::object>(b);
      break;
    }
  }
  if (base.is(cls)) return py::make_tuple(cls, args);
  py::object state = py::none();
  if (py::hasattr(self, "__dict__")) state = self.attr("__dict__");
  // pileprep._rebuild, a Python function (pickled by name; a pybind11 one cannot be).
  return py::make_tuple(py::module_::import("pileprep").attr("_rebuild"),
                        py::make_tuple(cls, base, args, state));
}

// The limit GptDataset::Open sets for a blend (kMaxBlendDatasets).
void CheckDatasetCount(size_t n) {
  if (n > kMaxBlendDatasets) {
    throw py::value_error(absl::StrCat(n, " datasets; at most ", kMaxBlendDatasets,
                                       " (dataset ids are int16, and Megatron's BlendedDataset "
                                       "asserts fewer than 32767)"));
  }
}

// `count` tokens at `data` (from IndexedDatasetView::BinBytes: inside the .bin) as a read-only
// view of the dataset's dtype, kept alive by `self`.
py::array TokenView(const PyIndexedDataset& d, const uint8_t* data, int64_t count,
                    py::handle self) {
  if (d.view->dtype() == TokenDType::kUint16) return View<uint16_t>(data, {count}, self);
  return View<int32_t>(data, {count}, self);
}

constexpr char kIndexedDatasetDoc[] =
    "IndexedDataset(prefix): Megatron-core's IndexedDataset over {prefix}.idx and {prefix}.bin, "
    "memory-mapped.\n\n"
    "ds[i] is sequence i, ds[start:stop] a list of sequences, ds.get(i, offset, length) part of "
    "one; every array is a read-only view of the mapped .bin (zero-copy), in the dataset's dtype "
    "(numpy.uint16 or numpy.int32).";

constexpr char kGetSequencesDoc[] =
    "ds[start:stop]: the sequences start..stop-1 as a list of read-only views, as Megatron's "
    "IndexedDataset.__getitem__ gives them: the slice is taken as slice.indices(len(ds)) takes "
    "it; a step other than 1 raises ValueError(\"Slices into indexed_dataset must be "
    "contiguous\"); the tokens are read from sequence start's pointer on, sum(lengths) of them, "
    "and split at the lengths (numpy.split). So an empty slice inside the dataset (ds[2:2], "
    "ds[3:1]) gives a list of one empty array, as numpy.split of no tokens does, and one that "
    "starts at len(ds) or past it (ds[len(ds):], any slice of an empty dataset) raises "
    "IndexError, as Megatron's sequence_pointers[start] does.";

constexpr char kGetPartDoc[] =
    "get(idx, offset=0, length=None): part of sequence idx, as Megatron's IndexedDataset.get: "
    "`length` tokens from token `offset` of the sequence (length None: to the sequence's end, "
    "length - offset). As there, they are read with numpy.frombuffer over the whole .bin from "
    "the sequence's pointer + offset tokens, so neither is bounded by the sequence: a read past "
    "its end continues into the next sequences, a negative offset reads before it, and a "
    "negative length (or None with offset past the end) reads to the end of the .bin. "
    "Raises IndexError for idx out of range (negative counts from the end), and ValueError with "
    "numpy.frombuffer's message where it raises: a start before the .bin or past its end "
    "(\"offset must be non-negative and no greater than buffer length\"), more tokens than the "
    "rest of the .bin (\"buffer is smaller than requested size\"). A read-only view of the mapped "
    ".bin.";

constexpr char kGptDatasetInitDoc[] =
    "GPTDataset(prefix_or_blend, seq_length, num_samples=None, seed=1234, split=None, "
    "split_index=0, add_extra_token=True, drop_last_partial_validation_sequence=True, "
    "legacy_split=False, cache_dir=None, mid_level_dataset_surplus=0.005)\n\n"
    "Megatron-core's GPTDataset, or its BlendedDataset for a blend. prefix_or_blend: a prefix, "
    "a string \"0.3 A 0.7 B\" / \"A B\", or Megatron's --data-path list ([\"0.3\", \"A\", "
    "\"0.7\", \"B\"], prefixes str.strip()ped as get_blend_from_list strips them). "
    "mid_level_dataset_surplus: Megatron's config field of that name: each dataset of a weighted "
    "blend is built for ceil(ceil(num_samples * w) * (1 + surplus)) samples; a finite number "
    ">= 0 (ValueError otherwise). Pickles as its arguments (a DataLoader worker opens it again).";

// ds[start:stop], as Megatron's IndexedDataset.__getitem__ with a slice (kGetSequencesDoc).
py::list GetSequences(py::object self, const py::slice& slice) {
  const auto& d = Self<PyIndexedDataset>(self);
  const IndexedDatasetView& v = *d.view;
  const int64_t n = v.num_sequences();
  py::ssize_t start = 0, stop = 0, step = 0, count = 0;
  if (!slice.compute(static_cast<py::ssize_t>(n), &start, &stop, &step, &count)) {
    throw py::error_already_set();  // step 0: "slice step cannot be zero", as slice.indices
  }
  if (step != 1) throw py::value_error("Slices into indexed_dataset must be contiguous");
  if (start >= n) {
    throw py::index_error(
        absl::StrCat("index ", start, " is out of bounds for axis 0 with size ", n));
  }
  // Every length read once, so that the split below matches the bounds checked (Open checked them
  // >= 0; a negative one now means the .idx was rewritten in place).
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<size_t>(count));
  int64_t total = 0;
  for (int64_t i = start; i < stop; ++i) {
    const int64_t length = v.sequence_length(i);
    if (length < 0 || __builtin_add_overflow(total, length, &total)) {
      Raise(absl::DataLossError(
          absl::StrCat(v.prefix(), ": sequence ", i, " has length ", length,
                       " (its .idx changed since it was opened: rewritten in place?)")));
    }
    lengths.push_back(length);
  }
  // numpy.frombuffer(bin, count=total, offset=sequence_pointers[start]), its errors included: the
  // pointers need not tile the .bin (Open checks each sequence, not that they follow each other).
  const int64_t pointer = v.sequence_pointer(start);
  const uint64_t item = v.itemsize();
  const uint64_t size = v.bin_bytes();
  if (pointer < 0 || static_cast<uint64_t>(pointer) > size) {
    throw py::value_error(absl::StrCat(
        v.prefix(), ".bin: sequences ", start, "..", stop - 1, " from byte ", pointer,
        ": offset must be non-negative and no greater than buffer length (", size, ")"));
  }
  if (static_cast<uint64_t>(total) > (size - static_cast<uint64_t>(pointer)) / item) {
    throw py::value_error(absl::StrCat(v.prefix(), ".bin: sequences ", start, "..", stop - 1, " (",
                                       total, " tokens from byte ", pointer,
                                       "): buffer is smaller than requested size"));
  }
  const uint8_t* data =
      v.BinBytes(static_cast<uint64_t>(pointer), static_cast<uint64_t>(total) * item);
  py::list out;
  if (lengths.empty()) {
    out.append(TokenView(d, data, 0, self));  // numpy.split of no tokens: one empty array
    return out;
  }
  for (int64_t length : lengths) {
    out.append(TokenView(d, data, length, self));
    data += static_cast<uint64_t>(length) * item;
  }
  return out;
}

// ds.get(idx, offset, length), as Megatron's IndexedDataset.get (kGetPartDoc): numpy.frombuffer's
// checks over the whole .bin, none against the sequence.
py::array GetPart(py::object self, int64_t idx, int64_t offset, std::optional<int64_t> length) {
  const auto& d = Self<PyIndexedDataset>(self);
  const IndexedDatasetView& v = *d.view;
  idx = Normalize(idx, v.num_sequences());
  const int64_t item = static_cast<int64_t>(v.itemsize());
  const int64_t pointer = v.sequence_pointer(idx);  // each read once from the mapped .idx
  const uint64_t size = v.bin_bytes();
  auto fail = [&](absl::string_view numpy_message) {
    throw py::value_error(absl::StrCat(v.prefix(), ".bin: sequence ", idx, ", offset ", offset,
                                       ", length ", length ? absl::StrCat(*length) : "None", ": ",
                                       numpy_message));
  };
  int64_t byte = 0;
  if (__builtin_mul_overflow(offset, item, &byte) || __builtin_add_overflow(byte, pointer, &byte) ||
      byte < 0 || static_cast<uint64_t>(byte) > size) {
    fail(
        absl::StrCat("offset must be non-negative and no greater than buffer length (", size, ")"));
  }
  // offset · itemsize fits an int64 (checked above), so length - offset cannot overflow.
  const int64_t count = length ? *length : v.sequence_length(idx) - offset;
  const uint64_t rest = size - static_cast<uint64_t>(byte);
  uint64_t tokens = 0;
  if (count < 0) {  // numpy.frombuffer's count=-1 (any negative): the rest of the buffer
    if (rest % static_cast<uint64_t>(item) != 0) {
      fail("buffer size must be a multiple of element size");
    }
    tokens = rest / static_cast<uint64_t>(item);
  } else {
    if (static_cast<uint64_t>(count) > rest / static_cast<uint64_t>(item)) {
      fail("buffer is smaller than requested size");
    }
    tokens = static_cast<uint64_t>(count);
  }
  const uint8_t* data =
      v.BinBytes(static_cast<uint64_t>(byte), tokens * static_cast<uint64_t>(item));
  return TokenView(d, data, static_cast<int64_t>(tokens), self);
}

py::object NumpyDtype(TokenDType d) {
  return py::module_::import("numpy").attr(d == TokenDType::kUint16 ? "uint16" : "int32");
}

PyGptDataset OpenGptDataset(py::object data_path, int64_t seq_length,
                            std::optional<int64_t> num_samples, uint32_t seed,
                            std::optional<std::string> split, int split_index, bool add_extra_token,
                            bool drop_last_partial_validation_sequence, bool legacy_split,
                            std::optional<std::string> cache_dir,
                            double mid_level_dataset_surplus) {
  GptDatasetOptions o;
  o.blend_surplus = mid_level_dataset_surplus;  // GptDataset::Open checks it (ValueError)
  o.sequence_length = seq_length;
  o.num_samples = num_samples;
  o.seed = seed;
  o.split = split.value_or("");
  o.split_index = split_index;
  o.add_extra_token = add_extra_token;
  o.drop_last_partial_validation_sequence = drop_last_partial_validation_sequence;
  o.split_rounding = legacy_split ? SplitRounding::kLegacy : SplitRounding::kCurrent;
  o.cache_dir = cache_dir.value_or("");
  // Ctrl-C while Open waits on another rank's build lock, the GIL released: the signal's Python
  // handler runs here (on the main thread; elsewhere PyErr_CheckSignals does nothing), and the
  // exception it raised (KeyboardInterrupt) is raised once Open has given up. The wait ignored
  // Ctrl-C until the other rank let go.
  //
  // Only on the main thread: elsewhere there is nothing to ask, and taking the GIL every 0.1 s is
  // harmful, as a daemon thread waiting on a lock that takes it while the interpreter finalizes is
  // ended by pthread_exit through these frames: std::terminate, SIGABRT at the process's exit.
  // Without it the wait is one blocking flock.
  bool raised = false;
  const py::module_ threading = py::module_::import("threading");
  if (threading.attr("current_thread")().is(threading.attr("main_thread")())) {
    o.interrupted = [&raised] {
      py::gil_scoped_acquire acquire;
      raised = PyErr_CheckSignals() != 0;
      return raised;
    };
  }
  absl::StatusOr<Blend> blend;
  std::vector<std::string> items;
  // bytes as str (a path may be given either way, as to open()); any other iterable: a list.
  const bool one_string =
      py::isinstance<py::str>(data_path) || py::isinstance<py::bytes>(data_path);
  if (one_string) {
    blend = ParseBlend(data_path.cast<std::string>());
  } else {
    for (py::handle h : data_path) items.push_back(py::str(h).cast<std::string>());
    blend = ParseBlend(items);
  }
  if (!blend.ok()) Raise(blend.status());
  absl::StatusOr<std::unique_ptr<GptDataset>> ds;
  {
    py::gil_scoped_release release;
    ds = GptDataset::Open(*blend, o);
  }
  if (raised) throw py::error_already_set();  // the handler's exception, still set
  if (!ds.ok()) Raise(ds.status());
  // A list is kept as the strings it was read as (its items may not pickle).
  py::object path = one_string ? data_path : py::cast(items);
  return PyGptDataset{*std::move(ds), seq_length,
                      py::make_tuple(path, seq_length, num_samples, seed, split, split_index,
                                     add_extra_token, drop_last_partial_validation_sequence,
                                     legacy_split, cache_dir, mid_level_dataset_surplus)};
}

}  // namespace
}  // namespace pileprep

PYBIND11_MODULE(_pileprep, m) {
  using namespace pileprep;
  m.doc() = "pileprep's loader: Megatron-core IndexedDataset, GPTDataset and blending, exactly.";

  py::class_<PyIndexedDataset>(m, "IndexedDataset", kIndexedDatasetDoc)
      .def(py::init([](const std::string& prefix) { return OpenIndexedDataset(prefix); }),
           py::arg("prefix"))
      .def("__len__",
           [](py::handle self) {
             const PyIndexedDataset& d = Self<PyIndexedDataset>(self);
             return d.view->num_sequences();
           })
      .def(
          "__getitem__",
          [](py::object self, int64_t i) -> py::array {
            const auto& d = Self<PyIndexedDataset>(self);
            i = Normalize(i, d.view->num_sequences());
            // The pointer and length as the mapped .idx holds them now, checked
            // (IndexedDatasetView::CheckedSequenceData): a file rewritten in place since it was
            // opened gives an error.
            int64_t n = 0;
            const uint8_t* data = d.view->CheckedSequenceData(i, &n);
            if (data == nullptr) {
              Raise(absl::DataLossError(absl::StrCat(
                  d.view->prefix(), ": sequence ", i,
                  " no longer inside the .bin (its .idx changed since it was opened)")));
            }
            if (d.view->dtype() == TokenDType::kUint16) return View<uint16_t>(data, {n}, self);
            return View<int32_t>(data, {n}, self);
          },
          py::arg("idx").noconvert(),
          "Sequence idx (negative counts from the end) as a read-only view.")
      .def("__getitem__", &GetSequences, py::arg("idx"), kGetSequencesDoc)
      .def(
          "__getitem__",
          [](py::handle self, const py::int_&) -> py::object {
            Self<PyIndexedDataset>(self);
            throw py::index_error("index out of range");  // past int64: out of any dataset
          },
          py::arg("idx"))
      .def("get", &GetPart, py::arg("idx").noconvert(), py::arg("offset").noconvert() = 0,
           py::arg("length").noconvert() = py::none(), kGetPartDoc)
      .def_property_readonly("sequence_lengths",
                             [](py::object self) {
                               const auto& d = Self<PyIndexedDataset>(self);
                               // int32 where they lie in the mapped .idx (not 4-byte
                               // aligned, as with the pointers below)
                               auto s = d.view->sequence_lengths();
                               return View<int32_t>(s.data(), {static_cast<py::ssize_t>(s.size())},
                                                    self);
                             })
      .def_property_readonly("sequence_pointers",
                             [](py::object self) {
                               const auto& d = Self<PyIndexedDataset>(self);
                               // int64 where they lie in the mapped .idx (not 8-byte aligned:
                               // numpy reads such arrays, as Megatron's own do)
                               return View<int64_t>(
                                   d.view->raw_sequence_pointers(),
                                   {static_cast<py::ssize_t>(d.view->num_sequences())}, self);
                             })
      .def_property_readonly("document_indices",
                             [](py::object self) {
                               const auto& d = Self<PyIndexedDataset>(self);
                               // int64 where they lie in the mapped .idx (not 8-byte aligned:
                               // numpy reads such arrays, as Megatron's own do)
                               return View<int64_t>(
                                   d.view->raw_document_indices(),
                                   {static_cast<py::ssize_t>(d.view->num_documents() + 1)}, self);
                             })
      .def_property_readonly("dtype",
                             [](py::handle self) {
                               const PyIndexedDataset& d = Self<PyIndexedDataset>(self);
                               return NumpyDtype(d.view->dtype());
                             })
      .def_property_readonly("num_tokens",
                             [](py::handle self) {
                               const PyIndexedDataset& d = Self<PyIndexedDataset>(self);
                               return d.view->num_tokens();
                             })
      .def_property_readonly("prefix",
                             [](py::handle self) {
                               const PyIndexedDataset& d = Self<PyIndexedDataset>(self);
                               return d.view->prefix();
                             })
      .def(py::pickle(
          [](py::handle self) {
            const PyIndexedDataset& d = Self<PyIndexedDataset>(self);
            return py::make_tuple(d.view->prefix());
          },
          [](const py::tuple& t) {
            if (t.size() != 1) throw std::runtime_error("IndexedDataset: bad pickle");
            return OpenIndexedDataset(t[0].cast<std::string>());
          }))
      // Pickled as a call to the class with the prefix, for every protocol: py::pickle covers 2
      // and up only, and protocols 0 and 1 aborted the interpreter. (__setstate__ above still
      // reads the pickles made before.)
      .def("__reduce__", [](py::handle self) {
        return Reduce(self, py::make_tuple(Self<PyIndexedDataset>(self).view->prefix()));
      });

  // The defaults are GptDatasetOptions' (the single source of them), not written again here.
  const GptDatasetOptions defaults;
  py::class_<PyGptDataset>(m, "GPTDataset")
      .def(py::init(&OpenGptDataset), py::arg("prefix_or_blend"), py::arg("seq_length").noconvert(),
           py::arg("num_samples").noconvert() = py::none(),
           // Not noconvert: pybind11 2.10 then refuses a numpy unsigned (PyLong_AsUnsignedLong).
           py::arg("seed") = defaults.seed, py::arg("split") = py::none(),
           py::arg("split_index").noconvert() = defaults.split_index,
           py::arg("add_extra_token") = defaults.add_extra_token,
           py::arg("drop_last_partial_validation_sequence") =
               defaults.drop_last_partial_validation_sequence,
           py::arg("legacy_split") = defaults.split_rounding == SplitRounding::kLegacy,
           py::arg("cache_dir") = py::none(),
           py::arg("mid_level_dataset_surplus") = defaults.blend_surplus, kGptDatasetInitDoc)
      .def(py::pickle(
          [](py::handle self) {
            const PyGptDataset& g = Self<PyGptDataset>(self);
            return g.args;
          },
          [](const py::tuple& t) {
            // 10 items: pickled before mid_level_dataset_surplus was an argument.
            if (t.size() != 10 && t.size() != 11) {
              throw std::runtime_error("GPTDataset: bad pickle");
            }
            return OpenGptDataset(
                t[0], t[1].cast<int64_t>(), t[2].cast<std::optional<int64_t>>(),
                t[3].cast<uint32_t>(), t[4].cast<std::optional<std::string>>(), t[5].cast<int>(),
                t[6].cast<bool>(), t[7].cast<bool>(), t[8].cast<bool>(),
                t[9].cast<std::optional<std::string>>(),
                t.size() == 11 ? t[10].cast<double>() : GptDatasetOptions().blend_surplus);
          }))
      // As IndexedDataset's: a call to the class with the constructor's arguments.
      .def("__reduce__",
           [](py::handle self) { return Reduce(self, Self<PyGptDataset>(self).args); })
      .def("__len__",
           [](py::handle self) {
             const PyGptDataset& g = Self<PyGptDataset>(self);
             return g.ds->size();
           })
      .def(
          "__getitem__",
          [](py::handle self, int64_t i) {
            const PyGptDataset& g = Self<PyGptDataset>(self);
            i = Normalize(i, g.ds->size());
            std::vector<int64_t> text;
            absl::Status s = g.ds->GetSample(i, &text);
            if (!s.ok()) Raise(s);
            py::array_t<int64_t> a(static_cast<py::ssize_t>(text.size()));
            std::copy(text.begin(), text.end(), a.mutable_data());
            return a;
          },
          py::arg("idx").noconvert())
      .def("__getitem__",
           [](py::handle self, const py::int_&) -> py::array {
             Self<PyGptDataset>(self);
             throw py::index_error("index out of range");  // past int64: out of any dataset
           })
      .def_property_readonly("document_index",
                             [](py::object self) {
                               const auto& ix = Self<PyGptDataset>(self).Single();
                               return View(ix.document_index,
                                           {static_cast<py::ssize_t>(ix.document_index.size())},
                                           self);
                             })
      .def_property_readonly("sample_index",
                             [](py::object self) {
                               const auto& ix = Self<PyGptDataset>(self).Single();
                               return View(
                                   ix.sample_index,
                                   {static_cast<py::ssize_t>(ix.sample_index.size() / 2), 2}, self);
                             })
      .def_property_readonly("shuffle_index",
                             [](py::object self) {
                               const auto& ix = Self<PyGptDataset>(self).Single();
                               return View(ix.shuffle_index, {ix.size()}, self);
                             })
      .def_property_readonly("num_epochs",
                             [](py::handle self) {
                               const PyGptDataset& g = Self<PyGptDataset>(self);
                               return g.Single().num_epochs;
                             })
      .def_property_readonly("separate_final_epoch",
                             [](py::handle self) {
                               const PyGptDataset& g = Self<PyGptDataset>(self);
                               return g.Single().separate_final_epoch;
                             })
      .def_property_readonly("is_blend",
                             [](py::handle self) {
                               const PyGptDataset& g = Self<PyGptDataset>(self);
                               return g.ds->is_blend();
                             })
      .def_property_readonly("sequence_range",
                             [](py::handle self) {
                               const PyGptDataset& g = Self<PyGptDataset>(self);
                               g.Single();
                               return py::make_tuple(g.ds->sequences().begin,
                                                     g.ds->sequences().end);
                             })
      .def_property_readonly("dataset_index",
                             [](py::object self) {
                               const auto& a =
                                   Self<PyGptDataset>(self).ds->blending().dataset_index;
                               return View(a, {static_cast<py::ssize_t>(a.size())}, self);
                             })
      .def_property_readonly("dataset_sample_index",
                             [](py::object self) {
                               const auto& a =
                                   Self<PyGptDataset>(self).ds->blending().dataset_sample_index;
                               return View(a, {static_cast<py::ssize_t>(a.size())}, self);
                             })
      .def_property_readonly(
          "loaded_from_cache",
          [](py::handle self) {
            const PyGptDataset& g = Self<PyGptDataset>(self);
            // Every dataset's indices (a blend's first only, it said before).
            for (int k = 0; k < g.ds->num_datasets(); ++k) {
              if (!g.ds->loaded_from_cache(k)) return false;
            }
            return true;
          },
          "whether every dataset's indices came from the cache (a blend's own: "
          "blending_loaded_from_cache)")
      .def_property_readonly("blending_loaded_from_cache",
                             [](py::handle self) {
                               const PyGptDataset& g = Self<PyGptDataset>(self);
                               return g.ds->blending_from_cache();
                             })
      .def_property_readonly("seq_length",
                             [](py::handle self) {
                               const PyGptDataset& g = Self<PyGptDataset>(self);
                               return g.seq_length;
                             })
      .def_property_readonly("add_extra_token", [](py::handle self) {
        const PyGptDataset& g = Self<PyGptDataset>(self);
        return g.ds->sample_tokens() > g.seq_length;
      });

  m.def(
      "blending_indices",
      [](std::vector<double> weights, int64_t size) {
        CheckDatasetCount(weights.size());
        if (size < 0) throw py::value_error(absl::StrCat("blending_indices: size ", size, " < 0"));
        if (weights.empty() && size > 0) {
          throw py::value_error(
              absl::StrCat("blending_indices: no weights to pick ", size, " samples by"));
        }
        // As GptDataset::Open (Megatron's BlendedDataset asserts it): the C++ build would pick
        // from a dataset of weight 0 at ties, and NaN errors compare false, so picks would go
        // wrong without a word.
        for (size_t d = 0; d < weights.size(); ++d) {
          if (!IsBlendWeight(weights[d])) {
            throw py::value_error(absl::StrCat("blending_indices: weight ", weights[d],
                                               " of dataset ", d, " is not finite > 0"));
          }
        }
        BlendingIndices b;
        try {
          py::gil_scoped_release release;  // `size` picks, each over every dataset
          b = BuildBlendingIndices(weights, size);
        } catch (const std::length_error&) {  // past what a vector holds: as out of memory
          Throw(PyExc_MemoryError,
                absl::StrCat("blending_indices: ", size, " picks do not fit in memory"));
        } catch (const std::bad_alloc&) {
          Throw(PyExc_MemoryError,
                absl::StrCat("blending_indices: ", size, " picks do not fit in memory"));
        }
        return py::make_tuple(
            Narrowed<int16_t>(b.dataset_index, {static_cast<py::ssize_t>(b.dataset_index.size())}),
            Narrowed<int64_t>(b.dataset_sample_index,
                              {static_cast<py::ssize_t>(b.dataset_sample_index.size())}));
      },
      py::arg("weights"), py::arg("size").noconvert(),
      "helpers.cpp build_blending_indices: (dataset_index int16, dataset_sample_index int64).");
  m.def(
      "exhaustive_blending_indices",
      [](std::vector<int64_t> sizes) {
        CheckDatasetCount(sizes.size());
        int64_t total = 0;
        for (size_t d = 0; d < sizes.size(); ++d) {
          // A negative size was taken as 0; a total past int64 would overflow the build's count.
          if (sizes[d] < 0 || sizes[d] > std::numeric_limits<int64_t>::max() - total) {
            throw py::value_error(absl::StrCat("exhaustive_blending_indices: size ", sizes[d],
                                               " of dataset ", d,
                                               sizes[d] < 0 ? " < 0" : " overflows the total"));
          }
          total += sizes[d];
        }
        BlendingIndices b;
        try {
          py::gil_scoped_release release;  // Σ sizes picks, each over the unspent datasets
          b = BuildExhaustiveBlendingIndices(sizes);
        } catch (const std::length_error&) {  // as blending_indices: ValueError("vector::reserve")
          Throw(PyExc_MemoryError, absl::StrCat("exhaustive_blending_indices: ", total,
                                                " picks do not fit in memory"));
        } catch (const std::bad_alloc&) {
          Throw(PyExc_MemoryError, absl::StrCat("exhaustive_blending_indices: ", total,
                                                " picks do not fit in memory"));
        }
        return py::make_tuple(
            Narrowed<int16_t>(b.dataset_index, {static_cast<py::ssize_t>(b.dataset_index.size())}),
            Narrowed<int64_t>(b.dataset_sample_index,
                              {static_cast<py::ssize_t>(b.dataset_sample_index.size())}));
      },
      py::arg("sizes").noconvert(), "helpers.cpp build_exhaustive_blending_indices.");
  m.def(
      "split_ranges",
      [](const std::string& split, int64_t num_sequences, bool legacy) {
        auto r = ComputeSplit(split, num_sequences,
                              legacy ? SplitRounding::kLegacy : SplitRounding::kCurrent);
        if (!r.ok()) Raise(r.status());
        py::list out;
        for (const auto& range : *r) {
          if (range) {
            out.append(py::make_tuple(range->begin, range->end));
          } else {
            out.append(py::none());
          }
        }
        return out;
      },
      py::arg("split"), py::arg("num_sequences").noconvert(), py::arg("legacy") = false,
      "Megatron's split of num_sequences: three (begin, end) or None.");
}
