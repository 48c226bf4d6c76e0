// The state of a Context (include/switchml/context.h): its switch hosts'
// control connections, its I/O threads, and how it leaves. Started by
// StartContext (context_start.h); owned by the Context.
#pragma once

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/worker_thread.h"
#include "switchml/config.h"
#include "switchml/control.grpc.pb.h"

namespace switchml {

struct ContextImpl {
  ContextConfig config;
  std::string job_text;  // "job 'name' at switch host:port[, ...]", for messages
  // One switch host of the job: its control connection and Join stream.
  struct Host {
    std::string job_text;  // "job 'name' at switch host:port", for messages
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<control::v1::Control::Stub> stub;
    grpc::ClientContext stream;
    std::unique_ptr<grpc::ClientReader<control::v1::JobEvent>> reader;
    std::thread control_thread;
    uint64_t token = 0;  // from the assignment, for Leave
  };
  std::vector<std::unique_ptr<Host>> hosts;  // worker thread t talks to host t % hosts
  std::vector<std::unique_ptr<WorkerThread>> workers;
  std::atomic<bool> stopping{false};
  std::once_flag stop_once;

  // One Host per switch host, named for messages.
  void NameHosts(const std::vector<sockaddr_in>& controls);
  // Starts the I/O threads (thread t sends to destinations[t]) and a thread
  // per host that watches its control stream.
  Status StartThreads(const std::vector<sockaddr_in>& destinations);
  void FailAll(const Status& s);
  // Reads a host's job events until its stream ends; turns them into
  // failures of every thread (a job that fails on one host fails on all).
  void WatchControlStream(Host& host);
  // Tells each host that this rank leaves the job (`reason`: why, for the
  // other ranks; "": it stopped), so that the switch ends the job at once.
  void LeaveHosts(const std::string& reason);
  // An I/O thread's operation timed out waiting for late ranks: the job is
  // over for this rank, and the others (the late ones too) learn why from the
  // switch instead of waiting out their own timeouts. Off the I/O thread.
  void OnTimedOut(const std::string& reason);
  std::once_flag timed_out_once;
  std::thread leaver;  // OnTimedOut's; Stop() joins it
  // Ends the Join streams (of an assignment this worker cannot use).
  void Abandon();
};

}  // namespace switchml
