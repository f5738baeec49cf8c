// sova-info: what each CUDA device supports of the virtual memory management
// API, and what sova will use of it. The same figures as the C API's
// sovaDeviceGetVmmSupport (this program calls it). SOVA_DRIVER=sim asks the
// host simulation instead of the GPU.
//
//   sova-info            every device
//   sova-info DEVICE     one device
// Exit status: 0, or 1 when there is no usable driver/device or the device
// does not exist (with sova's message on stderr: sovaGetLastErrorMessage).
#include <sova/sova.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

const char* yes_no(int v) { return v ? "yes" : "no"; }

std::string bytes_text(size_t b) {
  char text[64];
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) {
    std::snprintf(text, sizeof text, "%zu GiB", b >> 30);
  } else if (b >= (size_t{1} << 20)) {
    std::snprintf(text, sizeof text, "%.4g MiB", static_cast<double>(b) / (1 << 20));
  } else {
    std::snprintf(text, sizeof text, "%zu B", b);
  }
  return text;
}

int print_device(int device) {
  sovaVmmSupport s;
  const cudaError_t err = sovaDeviceGetVmmSupport(&s, device);
  if (err != cudaSuccess) {
    // The C API's message names the cause; without a driver or GPU it says
    // so and points to SOVA_DRIVER=sim (the runtime's code alone misleads).
    std::fprintf(stderr, "sova-info: device %d: %s\n", device, sovaGetLastErrorMessage());
    return 1;
  }
  std::printf("device %d: %s, %s\n", device, s.name, bytes_text(s.totalMemory).c_str());
  std::printf("  device supports\n");
  std::printf("    virtual memory management   %s\n", yes_no(s.vmm));
  std::printf("    granularity minimum         %s\n", bytes_text(s.granularityMinimum).c_str());
  std::printf("    granularity recommended     %s\n", bytes_text(s.granularityRecommended).c_str());
  std::printf("    POSIX file descriptors      %s\n", yes_no(s.posixFd));
  std::printf("    fabric handles              %s\n", yes_no(s.fabric));
  std::printf("    generic compression         %s\n", yes_no(s.compression));
  std::printf("    multicast (NVLink SHARP)    %s\n", yes_no(s.multicast));
  std::printf("    GPUDirect RDMA with VMM     %s\n", yes_no(s.rdmaWithVmm));
  std::printf("    host NUMA memory under VMM  %s (nearest node %d)\n", yes_no(s.hostNumaVmm), s.hostNumaId);
  std::printf("  sova will use\n");
  std::printf("    pools                       %s\n", yes_no(s.sovaPools));
  std::printf("    IPC export (POSIX fd)       %s\n",
              yes_no((s.sovaHandleTypes & cudaMemHandleTypePosixFileDescriptor) != 0));
  std::printf("    IPC export (fabric)         no (not built; docs/ipc.md)\n");
  std::printf("    compressible pools          %s\n", yes_no(s.sovaCompression));
  std::printf("    host memory pools           %s\n", yes_no(s.sovaHostPools));
  std::printf("    multicast                   no (designed, not built; docs/vmm.md)\n");
  std::printf("    RDMA-capable chunks         %s\n", yes_no(s.sovaRdma));
  std::printf("    largest chunk (default)     %s\n", bytes_text(s.sovaChunkBytes).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0))) {
    std::fprintf(stderr, "usage: sova-info [DEVICE]   (SOVA_DRIVER=sim: the host simulation)\n");
    return argc > 2 ? 2 : 0;
  }
  if (argc == 2) {
    char* end = nullptr;
    const long device = std::strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || device < 0 || device > 1 << 16) {
      std::fprintf(stderr, "sova-info: '%s' is not a device ordinal\n", argv[1]);
      return 2;
    }
    return print_device(static_cast<int>(device));
  }
  int status = 0;
  for (int device = 0;; ++device) {
    sovaVmmSupport s;
    const cudaError_t err = sovaDeviceGetVmmSupport(&s, device);
    if (err == cudaErrorInvalidDevice && device > 0) break;  // past the last device
    if (err != cudaSuccess) return print_device(device);     // says why
    status |= print_device(device);
  }
  return status;
}
