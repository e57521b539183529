#!/usr/bin/env python3
"""Every C++ block of the README builds against the source tree's headers.

- The walk-through of "Write your own app" must be examples/remote_linear's
  source, byte for byte (the consumer test builds and runs that file).
- A block with its own main() is compiled as it stands.
- Any other block is a fragment: it is compiled as the body of a function
  whose parameters are the names fragments use without declaring them (w, a,
  x, y, ...), in one file, each in its own function.
Usage: check_blocks.py SOURCE_DIR COMPILER
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

HARNESS_TOP = """#include <functional>
#include <castor.hpp>

CASTOR_REMOTE_MODULE(torch::nn::Linear, int64_t, int64_t);
CASTOR_FUNCTION(my_add, [](torch::Tensor a, torch::Tensor b) { return a + b; });

// A class that opted in to checkpoints, for the fragments that save one.
struct Server {
  void save(torch::serialize::OutputArchive&) const {}
  void load(torch::serialize::InputArchive&) {}
};
CASTOR_CLASS(Server).checkpointed();
"""

HARNESS_PARAMS = """castor::Worker& w, torch::Tensor a, torch::Tensor t1, torch::Tensor t2, torch::Tensor x,
    torch::Tensor y, torch::nn::Linear head, castor::nn::RemoteModule<torch::nn::Linear>& encoder,
    std::vector<castor::RRef<torch::Tensor>> head_params, castor::optim::DistributedOptimizer& opt,
    castor::RRef<Server> ps_rref, int64_t steps, double loss, const std::function<void(int64_t)>& train_one_step"""


def compile_source(compiler, root, source, what):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(source)
        path = f.name
    try:
        cmd = [compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
               "-Wno-unused-variable", "-Wno-unused-but-set-variable", "-D_GLIBCXX_USE_CXX11_ABI=1", "-I" + root,
               "-isystem", "/usr/include/torch/csrc/api/include", path]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=dict(os.environ, LC_ALL="C"))
        return what, r.returncode, r.stderr, source
    finally:
        os.unlink(path)


def main():
    root, compiler = sys.argv[1], sys.argv[2]
    readme = open(os.path.join(root, "README.md")).read()
    example = open(os.path.join(root, "examples/remote_linear/remote_linear.cpp")).read()
    blocks = [(readme[: m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"```cpp\n(.*?)```", readme, re.S)]
    if not blocks:
        print("FAIL: no C++ block in README.md")
        return 1
    jobs, fragments, failures = [], [], 0
    walked_through = False
    for line, code in blocks:
        if code == example:
            walked_through = True
            print(f"README.md:{line}: examples/remote_linear/remote_linear.cpp, verbatim")
        elif re.search(r"\bint main\(", code):
            jobs.append((f"README.md:{line} (a program)", code))
        else:
            fragments.append((line, code))
    if not walked_through:
        print("FAIL: no README block is examples/remote_linear/remote_linear.cpp as it stands")
        failures += 1
    harness = HARNESS_TOP
    for i, (line, code) in enumerate(fragments):
        harness += f"\n// README.md:{line}\n[[maybe_unused]] static void readme_block_{i}({HARNESS_PARAMS}) {{\n  {{\n"
        harness += code + "  }\n}\n"
    harness += "\nint main() { return 0; }\n"
    jobs.append((f"{len(fragments)} fragments (README.md lines " + ", ".join(str(l) for l, _ in fragments) + ")",
                 harness))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for what, rc, err, source in pool.map(lambda j: compile_source(compiler, root, j[1], j[0]), jobs):
            if rc == 0:
                print(f"{what}: builds")
                continue
            failures += 1
            print(f"FAIL: {what} does not build:\n{err[:6000]}")
            numbered = "\n".join(f"{n + 1:4} {l}" for n, l in enumerate(source.splitlines()))
            print(f"--- the source compiled ---\n{numbered}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
