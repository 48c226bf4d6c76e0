# What `cmake --install` puts where, and how other projects find it:
#   lib/libswitchml.so, .a        the client library and the embeddable switch
#   include/switchml/*.h          the public headers (and the generated version.h)
#   bin/switchml-*                the daemons and tools
#   lib/cmake/switchml/           find_package(switchml): switchml::switchml (shared), and
#                                 with COMPONENTS static: switchml::switchml_static
#   lib/pkgconfig/switchml.pc     pkg-config --cflags --libs switchml (switchml-static)
#   lib/python3/dist-packages/switchml_torch   the PyTorch backend (when built)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# One library made of the layers' objects (built position-independent for
# the static libraries the tree links), shared and static, so a consumer
# links one file. The shared one needs none of our build's dependencies at
# compile or link time: the public headers use only the standard library.
# The static one needs them at link time (find_package(switchml COMPONENTS
# static) finds them; pkg-config: switchml-static).
set(SWITCHML_OBJECTS src/common/library.cc
  $<TARGET_OBJECTS:switchml_core> $<TARGET_OBJECTS:switchml_transport> $<TARGET_OBJECTS:switchml_sim>
  $<TARGET_OBJECTS:switchml_rpc> $<TARGET_OBJECTS:switchml_switch>
  $<TARGET_OBJECTS:switchml_client> $<TARGET_OBJECTS:switchml_proto>)
if(SWITCHML_HAVE_DPDK)
  list(APPEND SWITCHML_OBJECTS $<TARGET_OBJECTS:switchml_dpdk>)
endif()
add_library(switchml SHARED ${SWITCHML_OBJECTS})
add_library(switchml_static STATIC ${SWITCHML_OBJECTS})
foreach(lib switchml switchml_static)
  target_link_libraries(${lib} PRIVATE protobuf::libprotobuf gRPC::grpc++ spdlog::spdlog
    PkgConfig::TOMLPP PkgConfig::SODIUM Threads::Threads prometheus-cpp::pull)
  if(SWITCHML_HAVE_AF_XDP)
    target_link_libraries(${lib} PRIVATE PkgConfig::XDP)
  endif()
  if(SWITCHML_HAVE_DPDK)
    target_link_libraries(${lib} PRIVATE PkgConfig::DPDK)
  endif()
  target_include_directories(${lib} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_include_directories(${lib} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${lib} PUBLIC cxx_std_20)
endforeach()
set_target_properties(switchml PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR} EXPORT_NAME switchml)
set_target_properties(switchml_static PROPERTIES OUTPUT_NAME switchml EXPORT_NAME switchml_static)
add_library(switchml::switchml ALIAS switchml)
add_library(switchml::switchml_static ALIAS switchml_static)

install(TARGETS switchml EXPORT switchmlTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS switchml_static EXPORT switchmlStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/switchml DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/switchml/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/switchml)
install(EXPORT switchmlTargets NAMESPACE switchml::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/switchml)
install(EXPORT switchmlStaticTargets NAMESPACE switchml::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/switchml)
# What the static library links beyond itself (its pkg-config Requires, and
# what find_package(switchml COMPONENTS static) finds).
set(SWITCHML_STATIC_REQUIRES "grpc++ protobuf spdlog tomlplusplus libsodium prometheus-cpp-pull")
if(SWITCHML_HAVE_AF_XDP)
  string(APPEND SWITCHML_STATIC_REQUIRES " libxdp libbpf")
  set(SWITCHML_STATIC_NEEDS_XDP TRUE)
else()
  set(SWITCHML_STATIC_NEEDS_XDP FALSE)
endif()
if(SWITCHML_HAVE_DPDK)
  string(APPEND SWITCHML_STATIC_REQUIRES " libdpdk")
  set(SWITCHML_STATIC_NEEDS_DPDK TRUE)
else()
  set(SWITCHML_STATIC_NEEDS_DPDK FALSE)
endif()
configure_package_config_file(cmake/switchmlConfig.cmake.in
  ${PROJECT_BINARY_DIR}/switchmlConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/switchml)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/switchmlConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/switchmlConfig.cmake
  ${PROJECT_BINARY_DIR}/switchmlConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/switchml)
# Relocatable: the prefix is where the .pc file lies, whatever --prefix said.
file(RELATIVE_PATH SWITCHML_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(cmake/switchml.pc.in ${PROJECT_BINARY_DIR}/switchml.pc @ONLY)
configure_file(cmake/switchml-static.pc.in ${PROJECT_BINARY_DIR}/switchml-static.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/switchml.pc ${PROJECT_BINARY_DIR}/switchml-static.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(SWITCHML_BUILD_APPS)
  install(TARGETS switchml-switch switchml-ctl switchml-bench switchml-sim
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET switchml_torch_ext)
  set(SWITCHML_PYTHON_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/python3/dist-packages/switchml_torch)
  install(TARGETS switchml_torch_ext LIBRARY DESTINATION ${SWITCHML_PYTHON_INSTALL_DIR})
  install(FILES python/switchml_torch/__init__.py DESTINATION ${SWITCHML_PYTHON_INSTALL_DIR})
endif()
