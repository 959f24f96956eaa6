// pileprep._pileprep: Python bindings of the loader (include/pileprep/loader.h). Errors become
// Python exceptions here, at the edge: OutOfRange -> IndexError, NotFound -> FileNotFoundError,
// InvalidArgument -> ValueError, anything else -> RuntimeError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pileprep/indexed_dataset_view.h"
#include "pileprep/loader.h"

namespace py = pybind11;

namespace pileprep {
namespace {

[[noreturn]] void Raise(const absl::Status& s) {
  std::string m(s.message());
  switch (s.code()) {
    case absl::StatusCode::kOutOfRange:
      throw py::index_error(m);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, m.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kInvalidArgument:
      throw py::value_error(m);
    default:
      throw std::runtime_error(m);
  }
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

// The limit GptDataset::Open sets for a blend (kMaxBlendDatasets).
void CheckDatasetCount(size_t n) {
  if (n > kMaxBlendDatasets) {
    throw py::value_error(absl::StrCat(n, " datasets; at most ", kMaxBlendDatasets,
                                       " (dataset ids are int16, and Megatron's BlendedDataset "
                                       "asserts fewer than 32767)"));
  }
}

py::object NumpyDtype(TokenDType d) {
  return py::module_::import("numpy").attr(d == TokenDType::kUint16 ? "uint16" : "int32");
}

PyGptDataset OpenGptDataset(py::object data_path, int64_t seq_length,
                            std::optional<int64_t> num_samples, uint32_t seed,
                            std::optional<std::string> split, int split_index, bool add_extra_token,
                            bool drop_last_partial_validation_sequence, bool legacy_split,
                            std::optional<std::string> cache_dir) {
  GptDatasetOptions o;
  o.sequence_length = seq_length;
  o.num_samples = num_samples;
  o.seed = seed;
  o.split = split.value_or("");
  o.split_index = split_index;
  o.add_extra_token = add_extra_token;
  o.drop_last_partial_validation_sequence = drop_last_partial_validation_sequence;
  o.split_rounding = legacy_split ? SplitRounding::kLegacy : SplitRounding::kCurrent;
  o.cache_dir = cache_dir.value_or("");
  absl::StatusOr<Blend> blend;
  std::vector<std::string> items;
  if (py::isinstance<py::str>(data_path)) {
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
  if (!ds.ok()) Raise(ds.status());
  // A list is kept as the strings it was read as (its items may not pickle).
  py::object path = py::isinstance<py::str>(data_path) ? data_path : py::cast(items);
  return PyGptDataset{
      *std::move(ds), seq_length,
      py::make_tuple(path, seq_length, num_samples, seed, split, split_index, add_extra_token,
                     drop_last_partial_validation_sequence, legacy_split, cache_dir)};
}

}  // namespace
}  // namespace pileprep

PYBIND11_MODULE(_pileprep, m) {
  using namespace pileprep;
  m.doc() = "pileprep's loader: Megatron-core IndexedDataset, GPTDataset and blending, exactly.";

  py::class_<PyIndexedDataset>(m, "IndexedDataset")
      .def(py::init([](const std::string& prefix) { return OpenIndexedDataset(prefix); }),
           py::arg("prefix"))
      .def("__len__", [](const PyIndexedDataset& d) { return d.view->num_sequences(); })
      .def("__getitem__",
           [](py::object self, int64_t i) -> py::array {
             const auto& d = self.cast<const PyIndexedDataset&>();
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
           })
      .def_property_readonly("sequence_lengths",
                             [](py::object self) {
                               const auto& d = self.cast<const PyIndexedDataset&>();
                               // int32 where they lie in the mapped .idx (not 4-byte
                               // aligned, as with the pointers below)
                               auto s = d.view->sequence_lengths();
                               return View<int32_t>(s.data(), {static_cast<py::ssize_t>(s.size())},
                                                    self);
                             })
      .def_property_readonly("sequence_pointers",
                             [](py::object self) {
                               const auto& d = self.cast<const PyIndexedDataset&>();
                               // int64 where they lie in the mapped .idx (not 8-byte aligned:
                               // numpy reads such arrays, as Megatron's own do)
                               return View<int64_t>(
                                   d.view->raw_sequence_pointers(),
                                   {static_cast<py::ssize_t>(d.view->num_sequences())}, self);
                             })
      .def_property_readonly("document_indices",
                             [](py::object self) {
                               const auto& d = self.cast<const PyIndexedDataset&>();
                               // int64 where they lie in the mapped .idx (not 8-byte aligned:
                               // numpy reads such arrays, as Megatron's own do)
                               return View<int64_t>(
                                   d.view->raw_document_indices(),
                                   {static_cast<py::ssize_t>(d.view->num_documents() + 1)}, self);
                             })
      .def_property_readonly("dtype",
                             [](const PyIndexedDataset& d) { return NumpyDtype(d.view->dtype()); })
      .def_property_readonly("num_tokens",
                             [](const PyIndexedDataset& d) { return d.view->num_tokens(); })
      .def_property_readonly("prefix", [](const PyIndexedDataset& d) { return d.view->prefix(); })
      .def(py::pickle([](const PyIndexedDataset& d) { return py::make_tuple(d.view->prefix()); },
                      [](const py::tuple& t) {
                        if (t.size() != 1) throw std::runtime_error("IndexedDataset: bad pickle");
                        return OpenIndexedDataset(t[0].cast<std::string>());
                      }));

  py::class_<PyGptDataset>(m, "GPTDataset")
      .def(py::init(&OpenGptDataset), py::arg("prefix_or_blend"), py::arg("seq_length"),
           py::arg("num_samples") = py::none(), py::arg("seed") = 1234,
           py::arg("split") = py::none(), py::arg("split_index") = 0,
           py::arg("add_extra_token") = true,
           py::arg("drop_last_partial_validation_sequence") = true, py::arg("legacy_split") = false,
           py::arg("cache_dir") = py::none())
      .def(py::pickle([](const PyGptDataset& g) { return g.args; },
                      [](const py::tuple& t) {
                        if (t.size() != 10) throw std::runtime_error("GPTDataset: bad pickle");
                        return OpenGptDataset(
                            t[0], t[1].cast<int64_t>(), t[2].cast<std::optional<int64_t>>(),
                            t[3].cast<uint32_t>(), t[4].cast<std::optional<std::string>>(),
                            t[5].cast<int>(), t[6].cast<bool>(), t[7].cast<bool>(),
                            t[8].cast<bool>(), t[9].cast<std::optional<std::string>>());
                      }))
      .def("__len__", [](const PyGptDataset& g) { return g.ds->size(); })
      .def("__getitem__",
           [](const PyGptDataset& g, int64_t i) {
             i = Normalize(i, g.ds->size());
             std::vector<int64_t> text;
             absl::Status s = g.ds->GetSample(i, &text);
             if (!s.ok()) Raise(s);
             py::array_t<int64_t> a(static_cast<py::ssize_t>(text.size()));
             std::copy(text.begin(), text.end(), a.mutable_data());
             return a;
           })
      .def_property_readonly("document_index",
                             [](py::object self) {
                               const auto& ix = self.cast<const PyGptDataset&>().Single();
                               return View(ix.document_index,
                                           {static_cast<py::ssize_t>(ix.document_index.size())},
                                           self);
                             })
      .def_property_readonly("sample_index",
                             [](py::object self) {
                               const auto& ix = self.cast<const PyGptDataset&>().Single();
                               return View(
                                   ix.sample_index,
                                   {static_cast<py::ssize_t>(ix.sample_index.size() / 2), 2}, self);
                             })
      .def_property_readonly("shuffle_index",
                             [](py::object self) {
                               const auto& ix = self.cast<const PyGptDataset&>().Single();
                               return View(ix.shuffle_index, {ix.size()}, self);
                             })
      .def_property_readonly("num_epochs",
                             [](const PyGptDataset& g) { return g.Single().num_epochs; })
      .def_property_readonly("separate_final_epoch",
                             [](const PyGptDataset& g) { return g.Single().separate_final_epoch; })
      .def_property_readonly("is_blend", [](const PyGptDataset& g) { return g.ds->is_blend(); })
      .def_property_readonly("sequence_range",
                             [](const PyGptDataset& g) {
                               g.Single();
                               return py::make_tuple(g.ds->sequences().begin,
                                                     g.ds->sequences().end);
                             })
      .def_property_readonly("dataset_index",
                             [](py::object self) {
                               const auto& a =
                                   self.cast<const PyGptDataset&>().ds->blending().dataset_index;
                               return View(a, {static_cast<py::ssize_t>(a.size())}, self);
                             })
      .def_property_readonly(
          "dataset_sample_index",
          [](py::object self) {
            const auto& a = self.cast<const PyGptDataset&>().ds->blending().dataset_sample_index;
            return View(a, {static_cast<py::ssize_t>(a.size())}, self);
          })
      .def_property_readonly(
          "loaded_from_cache",
          [](const PyGptDataset& g) {
            // Every dataset's indices (a blend's first only, it said before).
            for (int k = 0; k < g.ds->num_datasets(); ++k) {
              if (!g.ds->loaded_from_cache(k)) return false;
            }
            return true;
          },
          "whether every dataset's indices came from the cache (a blend's own: "
          "blending_loaded_from_cache)")
      .def_property_readonly("blending_loaded_from_cache",
                             [](const PyGptDataset& g) { return g.ds->blending_from_cache(); })
      .def_property_readonly("seq_length", [](const PyGptDataset& g) { return g.seq_length; })
      .def_property_readonly("add_extra_token", [](const PyGptDataset& g) {
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
        {
          py::gil_scoped_release release;  // `size` picks, each over every dataset
          b = BuildBlendingIndices(weights, size);
        }
        return py::make_tuple(
            Narrowed<int16_t>(b.dataset_index, {static_cast<py::ssize_t>(b.dataset_index.size())}),
            Narrowed<int64_t>(b.dataset_sample_index,
                              {static_cast<py::ssize_t>(b.dataset_sample_index.size())}));
      },
      py::arg("weights"), py::arg("size"),
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
        {
          py::gil_scoped_release release;  // Σ sizes picks, each over the unspent datasets
          b = BuildExhaustiveBlendingIndices(sizes);
        }
        return py::make_tuple(
            Narrowed<int16_t>(b.dataset_index, {static_cast<py::ssize_t>(b.dataset_index.size())}),
            Narrowed<int64_t>(b.dataset_sample_index,
                              {static_cast<py::ssize_t>(b.dataset_sample_index.size())}));
      },
      py::arg("sizes"), "helpers.cpp build_exhaustive_blending_indices.");
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
      py::arg("split"), py::arg("num_sequences"), py::arg("legacy") = false,
      "Megatron's split of num_sequences: three (begin, end) or None.");
}
