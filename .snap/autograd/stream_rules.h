// The accumulation-stream rule of docs/STREAMS.md "Backward", as a pure function over
// stream values (testable without a GPU). Cases, labelled as in the code of
// InputBuffer::add:
//   (Cpu) the gradient is not on a GPU: no streams, no events;
//   (A)   it lives on the consumer's device: accumulate on the consumer stream;
//   (B)   it lives on the producer's device only: accumulate on the producer stream;
//   (C)   neither: accumulate on the current stream of its device.
// A missing producer or consumer stream (a CPU node, or a root gradient)
// reads as the current stream of the gradient's device.
#pragma once

#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/device.h>

namespace tg::autograd {

enum class AccumulateOn { Cpu, ConsumerStream, ProducerStream, CurrentStream };

struct StreamDecision {
  AccumulateOn rule;
  cuda::Stream stream;  // invalid for Cpu
};

inline cuda::Stream resolve_stream(const cuda::Stream& s, const cuda::Stream& current) {
  return s.is_valid() ? s : current;
}

// producer/consumer already resolved (see resolve_stream); `current` is the
// current stream of var's device.
inline StreamDecision choose_accumulation_stream(Device var_device, const cuda::Stream& producer,
                                                 const cuda::Stream& consumer, const cuda::Stream& current) {
  if (!var_device.is_cuda()) return {AccumulateOn::Cpu, cuda::Stream()};
  if (consumer.device_index() == var_device.index()) return {AccumulateOn::ConsumerStream, consumer};
  if (producer.device_index() == var_device.index()) return {AccumulateOn::ProducerStream, producer};
  return {AccumulateOn::CurrentStream, current};
}

// The first producer records a ready event only when somebody will wait on
// it: the consumer runs on another stream, or a later accumulation does.
inline bool first_producer_needs_event(const cuda::Stream& producer, const cuda::Stream& consumer,
                                       const cuda::Stream& accumulate) {
  return consumer != producer || accumulate != producer;
}

}  // namespace tg::autograd
