#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test sluice: the Vulkan loader,
# a Vulkan driver when no device is present (lavapipe, a CPU driver from
# mesa-vulkan-drivers), and the Khronos validation layer used by the tests.
# Idempotent: installs nothing when everything is there.
set -euo pipefail
need=()
ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1' || need+=(libvulkan1)
icds=$(ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json /usr/local/share/vulkan/icd.d/*.json 2>/dev/null || true)
[ -n "$icds" ] || need+=(mesa-vulkan-drivers)
ls /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json >/dev/null 2>&1 || need+=(vulkan-validationlayers)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
# The test gates need rustfmt and clippy.
for c in rustfmt clippy; do
  cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$c" >/dev/null 2>&1 || true
done
