// Dependencies: turns the boxes tasks read and write into events, waits and signals.
//
//   1. Data edges. A task waits for the tasks of the operations its operation is `after`: with
//      `.tile`/`.chunk`, only those whose writes overlap what it reads; without, all of them that
//      announce to its rank. Within one operation, a task waits for earlier tasks of the same
//      operation whose writes it reads (a reduction waits for the sends into its slots).
//   2. Credits (write-after-read and write-after-write). A task that writes a region waits for the
//      tasks earlier in program order that read or write it on that rank, unless those wait for the
//      writer themselves. This covers a put into a slot a peer still reads (ring steps, double
//      buffers) and in-place collectives (the reduction waits for the sends that read its input).
//   3. Launch fences. A write into another rank's memory waits for that rank's fence task of the
//      same launch, which runs only after the peer finished its previous launch.
// A consumer waits for the producers of each operation through one counting wait: on the
// producer's own counter when it is alone, else on a counter every producer of that set signals
// (shared by the consumers on that rank that wait for the same set).
// Every event lives on the rank that waits on it; the signal's hand-off kind follows from where the
// producer runs (same GPU: a local counter; same node: a flag over NVLink; another node: the host
// proxies, which deliver the task's writes into that node first, then the signal). A task that
// reads memory of another node is a UserError: between nodes only the sender moves data. So is a
// write that must wait for an earlier write into another node when neither runs on that node and
// no task there that waited for the first write covers it: nothing would order the two landings.
#pragma once

#include "compiler/plan/plan.h"
#include "dsl/source.h"

namespace mkc::plan {

// Nodes are plan.ranks_per_node consecutive ranks (the lowering sets it). `file`, when given,
// places the operations an error names (file:line:col).
void derive_dependencies(Plan& plan, const dsl::SourceFile* file = nullptr);

}  // namespace mkc::plan
