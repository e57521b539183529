# Finds castor's dependencies (all Debian packages) and bundles them into one
# interface target, castor_deps. Also used by castorConfig.cmake after install.
include_guard(GLOBAL)
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED)  # TLS (castor's own sessions) and the door's HMAC
find_package(nlohmann_json 3 REQUIRED)

# CAF 0.17 ships no CMake package: find the libraries and headers directly.
find_path(CASTOR_CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CASTOR_CAF_CORE caf_core REQUIRED)
find_library(CASTOR_CAF_IO caf_io REQUIRED)

if(NOT TARGET castor_deps)
  add_library(castor_deps INTERFACE)
  target_include_directories(castor_deps SYSTEM INTERFACE ${CASTOR_CAF_INCLUDE_DIR})
  # Link order matters: caf_io before caf_core.
  target_link_libraries(castor_deps INTERFACE
    ${CASTOR_CAF_IO} ${CASTOR_CAF_CORE}
    ${TORCH_LIBRARIES} OpenSSL::SSL OpenSSL::Crypto ZLIB::ZLIB nlohmann_json::nlohmann_json Threads::Threads)
endif()
