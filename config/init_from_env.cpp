// The launch variables of castor run, torchrun, Slurm and Open MPI.
#include "config/init_from_env.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "actors/api/errors.hpp"
#include "config/cluster_file.hpp"

namespace castor {

// Note [Launch variables]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A program linked against castor runs under whatever starts processes on
// the user's machines; each of these says who a process is in its own
// variables, and init_rpc_from_env reads the first set present:
//  V0. castor launch's and castor worker's, for a cluster file's "program":
//      CASTOR_CLUSTER_FILE and CASTOR_WORKER (CASTOR_LOCAL=1 for --local).
//      The file gives the world (names, ranks, addresses, TLS, the secret:
//      every worker of the job must agree on them) and its "options" win
//      over the caller's WorkerOptions, which give every option the file
//      does not name (a program's own timeouts, threads, CAF settings).
//  V1. torchrun's (castor run sets the same): RANK, WORLD_SIZE, MASTER_ADDR,
//      MASTER_PORT, LOCAL_RANK. Once RANK or WORLD_SIZE is set, the first
//      four are required (the last two not when the caller's WorkerOptions
//      give the master: a master is one address, never half of two).
//  V2. Slurm's (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master
//      is MASTER_ADDR, else the first host of SLURM_JOB_NODELIST (its
//      compressed form expanded); the port MASTER_PORT, else one derived
//      from SLURM_JOB_ID (port_from_job_id), so that every rank agrees on
//      it without talking.
//  V3. Open MPI's (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//      OMPI_COMM_WORLD_LOCAL_RANK. Open MPI names no host: MASTER_ADDR,
//      else 127.0.0.1 when every rank runs on this host (LOCAL_SIZE equals
//      SIZE); the port MASTER_PORT, else derived from the job id Open MPI
//      gives (OMPI_MCA_ess_base_jobid).
//  V4. A value that is not a number in range, or a set that lacks a part,
//      is an error naming the variable and what it held; nothing is guessed.
namespace detail {

[[noreturn]] void refuse(const std::string& why) {
  throw RpcError(ErrorInfo{ErrorKind::Lookup, "?", "init_rpc_from_env: " + why});
}

namespace {

using Lookup = std::function<const char*(const char*)>;

const char* get(const Lookup& lookup, const char* name) {
  const char* v = lookup(name);
  return v && *v ? v : nullptr;
}

int64_t integer(const Lookup& lookup, const char* name, int64_t lo, int64_t hi) {
  const char* v = get(lookup, name);
  if (!v) refuse(std::string(name) + " is not set");
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < lo || n > hi)
    refuse(std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], got '" + v + "'");
  return n;
}

int64_t integer_or(const Lookup& lookup, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  return get(lookup, name) ? integer(lookup, name, lo, hi) : fallback;
}

uint16_t port_or_job(const Lookup& lookup, const char* job_variable, const std::string& source) {
  if (get(lookup, "MASTER_PORT")) return uint16_t(integer(lookup, "MASTER_PORT", 1, 65535));
  const char* job = get(lookup, job_variable);
  if (!job) refuse(source + " gives no port: set MASTER_PORT (or " + job_variable + ")");
  if (!std::isdigit(static_cast<unsigned char>(job[0])))
    refuse(std::string(job_variable) + " must start with a number, got '" + job + "'");
  uint64_t id = std::strtoull(job, nullptr, 10);  // its leading digits
  return port_from_job_id(id);
}

// One launcher's rank, world size and (optional) local rank, each checked (V4).
void read_ranks(const Lookup& lookup, LaunchEnv& e, const char* rank, const char* size, const char* local_rank) {
  e.world_size = int(integer(lookup, size, 1, kMaxWorld));
  e.rank = int(integer(lookup, rank, 0, e.world_size - 1));
  e.local_rank = int(integer_or(lookup, local_rank, 0, kMaxWorld, -1));
}

}  // namespace

uint16_t port_from_job_id(uint64_t job_id) { return uint16_t(10000 + job_id % 20000); }

// Slurm's own bound on a job's nodes is far below this; a list past it is
// refused, not expanded until memory runs out.
constexpr size_t kMaxHosts = 100000;

std::vector<std::string> expand_host_list(const std::string& list) {
  auto bad = [&](const std::string& why) { throw std::invalid_argument("host list '" + list + "': " + why); };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    // One item: text and bracket groups up to a comma outside brackets.
    std::vector<std::string> names{""};
    while (i < list.size() && list[i] != ',') {
      if (list[i] == ']') bad("']' without '['");
      if (list[i] != '[') {
        for (auto& n : names) n += list[i];
        ++i;
        continue;
      }
      auto close = list.find(']', i);
      if (close == std::string::npos) bad("'[' without ']'");
      std::vector<std::string> parts;
      auto group = list.substr(i + 1, close - i - 1);
      if (group.empty()) bad("an empty range");
      size_t p = 0;
      while (p <= group.size()) {
        auto comma = group.find(',', p);
        auto range = group.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
        auto dash = range.find('-');
        auto lo_text = range.substr(0, dash);
        auto hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
        auto digits = [](const std::string& s) {
          return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
        };
        if (!digits(lo_text) || !digits(hi_text)) bad("'" + range + "' is not a number or a range");
        auto lo = std::stoul(lo_text), hi = std::stoul(hi_text);
        if (hi < lo || hi - lo > 100000) bad("'" + range + "' is not an ascending range");
        if (parts.size() + (hi - lo + 1) > kMaxHosts) bad("more than " + std::to_string(kMaxHosts) + " hosts");
        for (auto n = lo; n <= hi; ++n) {
          auto text = std::to_string(n);
          if (text.size() < lo_text.size()) text.insert(0, lo_text.size() - text.size(), '0');  // node[01-03]
          parts.push_back(text);
        }
        if (comma == std::string::npos) break;
        p = comma + 1;
      }
      if (names.size() * parts.size() > kMaxHosts)  // each at most kMaxHosts: no overflow
        bad("more than " + std::to_string(kMaxHosts) + " hosts");
      std::vector<std::string> grown;
      for (const auto& n : names)
        for (const auto& part : parts) grown.push_back(n + part);
      names = std::move(grown);
      i = close + 1;
    }
    if (names.size() == 1 && names[0].empty()) bad("an empty host name");
    if (out.size() + names.size() > kMaxHosts) bad("more than " + std::to_string(kMaxHosts) + " hosts");
    out.insert(out.end(), names.begin(), names.end());
    if (i < list.size()) {
      ++i;  // the comma
      if (i == list.size()) bad("an empty host name");
    }
  }
  if (out.empty()) bad("no hosts");
  return out;
}

LaunchEnv read_launch_env(const Lookup& lookup, bool need_master) {
  LaunchEnv e;
  if (get(lookup, "RANK") || get(lookup, "WORLD_SIZE")) {  // V1
    e.source = "torchrun";
    read_ranks(lookup, e, "RANK", "WORLD_SIZE", "LOCAL_RANK");
    if (!need_master) return e;
    const char* host = get(lookup, "MASTER_ADDR");
    if (!host) refuse("MASTER_ADDR is not set (RANK and WORLD_SIZE are: torchrun's variables need all four)");
    e.master_host = host;
    e.master_port = uint16_t(integer(lookup, "MASTER_PORT", 1, 65535));
  } else if (get(lookup, "SLURM_PROCID")) {  // V2
    e.source = "Slurm";
    read_ranks(lookup, e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
    if (!need_master) return e;
    if (const char* host = get(lookup, "MASTER_ADDR")) {
      e.master_host = host;
    } else {
      const char* nodes = get(lookup, "SLURM_JOB_NODELIST");
      if (!nodes) nodes = get(lookup, "SLURM_NODELIST");
      if (!nodes) refuse("Slurm gives no node list (SLURM_JOB_NODELIST) and MASTER_ADDR is not set");
      try {
        e.master_host = expand_host_list(nodes).front();
      } catch (const std::invalid_argument& bad) {
        refuse(std::string("SLURM_JOB_NODELIST: ") + bad.what());
      }
    }
    // SLURM_JOBID is the older name, used when only it is set.
    bool old_name = get(lookup, "SLURM_JOBID") && !get(lookup, "SLURM_JOB_ID");
    e.master_port = port_or_job(lookup, old_name ? "SLURM_JOBID" : "SLURM_JOB_ID", "Slurm");
  } else if (get(lookup, "OMPI_COMM_WORLD_RANK")) {  // V3
    e.source = "Open MPI";
    read_ranks(lookup, e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
    if (!need_master) return e;
    if (const char* host = get(lookup, "MASTER_ADDR")) {
      e.master_host = host;
    } else if (integer_or(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxWorld, -1) == e.world_size) {
      e.master_host = "127.0.0.1";
    } else {
      refuse("Open MPI names no master host and the ranks span several hosts: set MASTER_ADDR to rank 0's "
             "host (mpirun -x MASTER_ADDR=...)");
    }
    e.master_port = port_or_job(lookup, "OMPI_MCA_ess_base_jobid", "Open MPI");
  } else {
    refuse("no launcher's variables found: set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (castor run and "
           "torchrun do), or start the program with srun (Slurm) or mpirun (Open MPI)");
  }
  return e;
}

}  // namespace detail

Worker init_rpc_from_env(WorkerOptions base) {
  const char* file = std::getenv("CASTOR_CLUSTER_FILE");
  if (file && *file) {  // V0
    const char* name = std::getenv("CASTOR_WORKER");
    if (!name || !*name) detail::refuse("CASTOR_CLUSTER_FILE is set but CASTOR_WORKER is not");
    WorkerOptions opts;
    try {
      opts = config::load_cluster_file(file).options_for(name, std::move(base));
    } catch (const config::ConfigError& e) {
      detail::refuse(e.what());
    }
    if (const char* local = std::getenv("CASTOR_LOCAL"); local && std::string(local) == "1")
      config::move_to_this_host(opts);
    return init_rpc(std::move(opts));
  }
  // What the caller set wins; the launcher fills the rest.
  bool complete = base.rank >= 0 && base.world_size > 0 && !base.master.host.empty() && base.master.port != 0;
  if (!complete) {
    bool need_master = base.master.host.empty() || base.master.port == 0;
    auto env = detail::read_launch_env([](const char* name) { return std::getenv(name); }, need_master);
    if (base.rank < 0) base.rank = env.rank;
    if (base.world_size <= 0) base.world_size = env.world_size;
    if (need_master) base.master = {env.master_host, env.master_port};  // a master is one address, never half of two
  }
  return init_rpc(std::move(base));
}

}  // namespace castor
