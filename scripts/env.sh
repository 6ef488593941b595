# Sourced by the scripts: a runtime dir the Vulkan loader can use on headless machines.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
