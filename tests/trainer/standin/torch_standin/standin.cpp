// A stand-in accelerator for tests: PyTorch's PrivateUse1 device (the open-registration slot
// torch_npu occupies as "npu"), renamed "standin" by torch_standin/__init__.py. Its memory is
// host memory and every operator without a kernel here runs through PyTorch's own CPU
// fallback, so it computes exactly what the CPU computes; but its tensors carry the
// PrivateUse1 dispatch key, so c10d sends them to the process group's PrivateUse1 backend,
// which gloo does not provide: "No backend type associated with device type standin", as
// torch_npu's tensors get "... device type npu".
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/Functions.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 4
template <class T>
using Optional = c10::optional<T>;
#define NULLOPT c10::nullopt
#else
template <class T>
using Optional = std::optional<T>;
#define NULLOPT std::nullopt
#endif

namespace {

constexpr c10::DeviceType kStandin = c10::DeviceType::PrivateUse1;

c10::DeviceIndex device_count() {
  const char* env = std::getenv("TORCH_STANDIN_DEVICES");
  return static_cast<c10::DeviceIndex>(env ? std::atoi(env) : 4);
}

thread_local c10::DeviceIndex current_index = 0;

void free_host(void* ptr) { c10::free_cpu(ptr); }

struct StandinAllocator final : c10::Allocator {
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 3
  c10::DataPtr allocate(size_t nbytes) const override {
#else
  c10::DataPtr allocate(size_t nbytes) override {
#endif
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {data, data, &free_host, c10::Device(kStandin, current_index)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, std::size_t count) const
#if !(TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 3)
      override
#endif
  {
    std::memcpy(dest, src, count);
  }
};

StandinAllocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

// One device index per thread, no streams of its own: every stream is the default stream,
// and work is done when the call returns (events complete at once).
struct StandinGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kStandin; }
  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device previous(kStandin, current_index);
    current_index = device.index();
    return previous;
  }
  c10::Device getDevice() const override { return c10::Device(kStandin, current_index); }
  void setDevice(c10::Device device) const override { current_index = device.index(); }
  void uncheckedSetDevice(c10::Device device) const noexcept override { current_index = device.index(); }
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override { return stream; }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    *event = nullptr;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, StandinGuard);

// What ATen asks a PrivateUse1 backend beyond its kernels (the autograd engine asks whether
// the device is available since torch 2.4; torch 2.1 asks only for these two).
struct StandinHooks final : at::PrivateUse1HooksInterface {
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 4
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) override { return at::detail::getDefaultCPUGenerator(); }
#else
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { current_index = index; }
  c10::DeviceIndex getCurrentDevice() const override { return current_index; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto previous = current_index;
    current_index = index;
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  // A DataLoader with pin_memory=True pins for the current accelerator: host memory is all
  // this device has.
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    c10::DataPtr grown = allocator.allocate(nbytes);
    size_t kept = std::min(nbytes, storage.nbytes());
    if (kept) std::memcpy(grown.get(), storage.data(), kept);
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(grown));
    storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
  }
#endif
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kStandin, current_index); }
};

StandinHooks hooks;

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(&hooks); }
} register_hooks;

void keep_memory(void*) {}

// The same bytes seen as a CPU tensor (the device's memory is host memory): the whole storage,
// resizable, so that a CPU kernel may resize an output; it then moves to CPU memory of its own
// (the device's memory stays the device's) and the caller copies it back.
at::Tensor host_alias(const at::Tensor& t) {
  void* data = t.storage().data_ptr().get();
  c10::Storage storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                       c10::DataPtr(data, data, &keep_memory, c10::Device(c10::kCPU)), c10::GetCPUAllocator(), true);
  return at::empty({0}, t.options().device(c10::kCPU)).set_(storage, t.storage_offset(), t.sizes(), t.strides());
}

at::Tensor empty_memory_format(c10::IntArrayRef size, Optional<at::ScalarType> dtype,
                               Optional<at::Layout>, Optional<at::Device>, Optional<bool>,
                               Optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, Optional<at::ScalarType> dtype,
                         Optional<at::Layout>, Optional<at::Device>, Optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  if (self.numel() == 0) return dst;
  at::Tensor src = self.device().type() == kStandin ? host_alias(self) : self;
  at::Tensor out = dst.device().type() == kStandin ? host_alias(dst) : dst;
  out.copy_(src);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), NULLOPT);
  return copy_from(self, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         Optional<at::MemoryFormat> memory_format) {
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, offset, size, stride);
}

at::Tensor& set_whole_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return at::native::set_storage_cpu_(self, source, 0, {numel}, {});
}

// Every other operator runs its CPU kernel on the same memory seen as CPU tensors: in-place
// updates (BatchNorm's running statistics, the optimizer's) land in the device's memory as
// they are made; an output that is an input, or a view of one, comes back as that input (or
// the same view of it); a resized output is copied back; a new output is copied onto the
// device of the first input.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t first = stack->size() - num_args;
  static const bool trace = std::getenv("TORCH_STANDIN_TRACE") != nullptr;  // each operator, as it falls back
  if (trace) std::fprintf(stderr, "[standin] %s\n", c10::toString(schema).c_str());
  std::vector<at::Tensor> originals;
  std::vector<at::Tensor> passed;
  Optional<c10::Device> target;
  auto to_host = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != kStandin) return t;
    if (!target) target = t.device();
    originals.push_back(t);
    passed.push_back(host_alias(t));
    return passed.back();
  };
  for (size_t i = first; i < stack->size(); ++i) {
    c10::IValue& arg = (*stack)[i];
    if (arg.isTensor()) {
      arg = to_host(arg.toTensor());
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> host;
      for (const at::Tensor& t : arg.toTensorList().vec()) host.push_back(to_host(t));
      arg = host;
    } else if (arg.isList()) {
      auto list = arg.toList();
      c10::impl::GenericList host(list.elementType());
      for (const c10::IValue& item : list.vec()) host.push_back(item.isTensor() ? c10::IValue(to_host(item.toTensor())) : item);
      arg = host;
    } else if (arg.isDevice() && arg.toDevice().type() == kStandin) {
      if (!target) target = arg.toDevice();
      arg = c10::Device(c10::kCPU);
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  std::vector<bool> moved(passed.size());
  for (size_t k = 0; k < passed.size(); ++k) {
    // A resized output: its bytes are in CPU memory now, and go back to the device.
    moved[k] = passed[k].storage().data_ptr().get() != originals[k].storage().data_ptr().get();
    if (moved[k] || passed[k].sizes() != originals[k].sizes()) copy_from_and_resize(passed[k], originals[k]);
  }
  auto to_device = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || r.device().type() != c10::kCPU || !target) return r;
    for (size_t k = 0; k < passed.size(); ++k) {
      if (r.is_same(passed[k])) return originals[k];
      if (!moved[k] && r.storage().data_ptr().get() == passed[k].storage().data_ptr().get()) {
        return originals[k].as_strided(r.sizes(), r.strides(), r.storage_offset());
      }
    }
    return r.to(*target);
  };
  const size_t num_returns = schema.returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    c10::IValue& ret = (*stack)[i];
    if (ret.isTensor()) {
      ret = to_device(ret.toTensor());
    } else if (ret.isTensorList()) {
      c10::List<at::Tensor> on_device;
      for (const at::Tensor& t : ret.toTensorList().vec()) on_device.push_back(to_device(t));
      ret = on_device;
    }
  }
}

void set_device(int64_t index) { current_index = static_cast<c10::DeviceIndex>(index); }
int64_t current_device() { return current_index; }
int64_t standin_device_count() { return device_count(); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_whole_storage);
  // A functional kernel where torch's composite one would call the out= variant with an
  // output the CPU kernel resizes (and warns about): mse_loss, as torch_npu registers it.
  m.impl("mse_loss", torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

// As an out-of-tree backend does (torch_npu among them): operators with no autograd kernel
// (c10d's collectives) fall through to the device's own kernel.
TORCH_LIBRARY_IMPL(_, AutogradPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY(standin, m) {
  m.def("set_device(int index) -> ()", &set_device);
  m.def("current_device() -> int", &current_device);
  m.def("device_count() -> int", &standin_device_count);
}
