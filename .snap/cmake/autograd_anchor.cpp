// Compiled into every target that links tapegrad::tapegrad (an INTERFACE
// source). The tensor layer reaches the autograd layer's op table through a
// weak reference (tensor/op_table.h); this strong reference makes the linker
// keep libtapegrad_autograd (shared libraries linked --as-needed) or the table's object
// (static libraries) even when the program itself calls only methods that
// the tensor layer defines.
extern "C" const void* tapegrad_autograd_ops();
namespace {
[[maybe_unused]] __attribute__((used)) const void* (*const tapegrad_autograd_anchor)() = &tapegrad_autograd_ops;
}  // namespace
