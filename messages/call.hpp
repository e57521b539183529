// Call messages: a request to run a function (or a method, or a builtin) on a
// worker, and its reply.
#pragma once

#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "messages/error_info.hpp"
#include "messages/ids.hpp"
#include "messages/value.hpp"
#include "messages/wire_checks.hpp"

namespace castor {

struct CallRequest {
  CallId id;                // chosen by the caller; the reply carries it back
  WorkerId caller = -1;     // rank of the calling worker
  std::string function;     // registered name, or "aten::<op>" for a builtin
  std::vector<Value> args;  // positional arguments

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, CallRequest& x) {
    return f(caf::meta::type_name("castor::CallRequest"), x.id, x.caller,
             wire::checked(x.function), wire::checked(x.args));
  }
};

struct CallReply {
  CallId id;
  bool ok = false;
  Value result;     // when ok
  ErrorInfo error;  // when not ok

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, CallReply& x) {
    return f(caf::meta::type_name("castor::CallReply"), x.id, x.ok, x.result, x.error);
  }
};

}  // namespace castor
