# Sourced by the gpu_check scripts that run rlx-wgpu on the NVIDIA H200 machine (no internet):
# the Vulkan loader from the carried .gl/*.deb, NVIDIA's Vulkan and EGL vendor files, wgpu-py
# and its wheels from the carried .whl/ (into /tmp/site), and the checkout on PYTHONPATH.
# Run from the repository root. Returns non-zero when wgpu cannot be installed.
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -f "$nvidia_icd" ]; then export VK_DRIVER_FILES="$nvidia_icd"; fi
nvidia_egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if [ -f "$nvidia_egl" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES="$nvidia_egl"; fi

if ! python3 -c 'import wgpu' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/wgpu*.whl .whl/cffi*.whl .whl/pycparser*.whl .whl/rendercanvas*.whl || return 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/plugins/rlx-wgpu${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
XDG_RUNTIME_DIR=$(mktemp -d) && export XDG_RUNTIME_DIR
export XDG_CACHE_HOME=/tmp/rlx-wgpu-cache  # not under $OUT: driver shader caches would come back too
