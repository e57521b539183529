// add_message_type for every message struct of messages/.
#include "messages/type_registry.hpp"

#include <caf/actor_system_config.hpp>

#include "messages/autograd_proto.hpp"
#include "messages/call.hpp"
#include "messages/chunk.hpp"
#include "messages/rendezvous.hpp"
#include "messages/rref_proto.hpp"
#include "messages/shutdown_proto.hpp"

namespace castor::detail {

void register_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<Value>("castor::Value");
  cfg.add_message_type<CallRequest>("castor::CallRequest");
  cfg.add_message_type<CallReply>("castor::CallReply");
  cfg.add_message_type<ErrorInfo>("castor::ErrorInfo");
  cfg.add_message_type<TensorChunk>("castor::TensorChunk");
  cfg.add_message_type<WorkerRecord>("castor::WorkerRecord");
  cfg.add_message_type<JoinRequest>("castor::JoinRequest");
  cfg.add_message_type<JoinReply>("castor::JoinReply");
  cfg.add_message_type<TerminationReport>("castor::TerminationReport");
  cfg.add_message_type<RRefControl>("castor::RRefControl");
  cfg.add_message_type<RRefControlAck>("castor::RRefControlAck");
  cfg.add_message_type<AutogradMeta>("castor::AutogradMeta");
  cfg.add_message_type<BackwardGrad>("castor::BackwardGrad");
  cfg.add_message_type<BackwardDone>("castor::BackwardDone");
  cfg.add_message_type<ContextControl>("castor::ContextControl");
}

}  // namespace castor::detail
