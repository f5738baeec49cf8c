// sova_torch — throwing PyTorch's own c10::OutOfMemoryError without being
// built against PyTorch.
//
// PyTorch turns a c10::OutOfMemoryError crossing into Python into
// torch.OutOfMemoryError, and any other std::exception into RuntimeError
// (pytorch#133280 for pluggable allocators). sova is built without PyTorch's
// headers, so sova_torch_bind_torch resolves, from the libc10.so PyTorch has
// loaded, c10::Error's exported constructor Error(SourceLocation,
// std::string) and the type_info and vtable of c10::OutOfMemoryError (a class
// that only inherits Error's constructors), and builds the exception in
// storage from __cxa_allocate_exception. The symbols name the C++11 string
// ABI, so a PyTorch built with another ABI simply does not bind. The binding
// is proved by throwing and catching one exception (as std::exception, whose
// what() must carry the message) before it is used.
#pragma once

#include <string>

namespace sova::torch_adapter {

/// Throws c10::OutOfMemoryError(message) if bound, else a std::bad_alloc
/// whose what() is `message`.
[[noreturn]] void throw_out_of_memory(const std::string& message);

}  // namespace sova::torch_adapter
