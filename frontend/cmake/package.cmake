# Packaging (issue 18): the one library users link, libkiln, combining the objects of kiln's
# five libraries (shared by default, a static libkiln.a with -DKILN_SHARED=OFF); the install
# rules (public headers, libkiln, a CMake package with the target kiln::kiln, kiln.pc for
# pkg-config) and a Debian package libkiln-dev (CPack). Each library keeps its own source list
# in its folder; libkiln takes their objects, so nothing is compiled twice.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_PARTS kiln_graph kiln_autograd kiln_codegen kiln_runtime kiln)
# The folders of the public headers (the rest of the tree is internal).
set(KILN_PUBLIC_INCLUDE_DIRS ${PROJECT_SOURCE_DIR}/frontend/include ${PROJECT_SOURCE_DIR}/graph/include
    ${PROJECT_SOURCE_DIR}/runtime/include ${KILN_GENERATED_INCLUDE_DIR})
# What the parts link outside kiln (keep in step with their CMakeLists.txt: a shared libkiln is
# linked with -z defs, so a missing one fails its build). Private to a shared libkiln: its
# DT_NEEDED entries find them at run time and its users need not find LLVM or oneTBB at all.
# A static libkiln passes them on to its users (kilnConfig.cmake finds them, kiln.pc lists them).
set(KILN_EXTERNAL_LIBS LLVM TBB::tbb ZLIB::ZLIB ${CMAKE_DL_LIBS})
set(KILN_PC_EXTERNAL_LIBS "-L${LLVM_LIBRARY_DIR} -lLLVM -ltbb -lz -l${CMAKE_DL_LIBS}")

set(kiln_objects)
foreach(part ${KILN_PARTS})
  list(APPEND kiln_objects $<TARGET_OBJECTS:${part}>)
endforeach()
if(KILN_SHARED)
  add_library(kiln_lib SHARED ${kiln_objects})
else()
  add_library(kiln_lib STATIC ${kiln_objects})
endif()
add_library(kiln::kiln ALIAS kiln_lib)
# SONAME libkiln.so.MAJOR.MINOR: before 1.0 a minor version may change the ABI.
set_target_properties(kiln_lib PROPERTIES OUTPUT_NAME kiln EXPORT_NAME kiln
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
target_include_directories(kiln_lib INTERFACE "$<BUILD_INTERFACE:${KILN_PUBLIC_INCLUDE_DIRS}>"
  "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
target_compile_features(kiln_lib INTERFACE cxx_std_20)
target_link_libraries(kiln_lib PRIVATE ${KILN_EXTERNAL_LIBS})
if(KILN_SHARED)
  # -Bsymbolic-functions: calls inside libkiln bind locally (no PLT), as in the static build.
  target_link_options(kiln_lib PRIVATE -Wl,-Bsymbolic-functions)
  if(NOT KILN_SANITIZE AND NOT KILN_TSAN) # the sanitizer runtimes are linked into executables only
    target_link_options(kiln_lib PRIVATE -Wl,-z,defs)
  endif()
endif()

# Install: the public headers only, libkiln, the CMake package and kiln.pc.
foreach(dir ${KILN_PUBLIC_INCLUDE_DIRS})
  install(DIRECTORY ${dir}/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
endforeach()
install(TARGETS kiln_lib EXPORT kilnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
# 0.x: only the same minor version is compatible (find_package(kiln 0.1) takes 0.1.z).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  DESTINATION ${KILN_CMAKE_DIR})

# kiln.pc: its prefix is the one given at install time (cmake --install --prefix P, or /usr for
# the Debian package), so it is configured twice: here with everything else, at install time with
# the prefix (KILN_PC_PREFIX stays a placeholder in the first pass).
if(KILN_SHARED)
  set(KILN_PC_LIBS "")
  set(KILN_PC_LIBS_PRIVATE "${KILN_PC_EXTERNAL_LIBS}")
else()
  set(KILN_PC_LIBS " ${KILN_PC_EXTERNAL_LIBS}")
  set(KILN_PC_LIBS_PRIVATE "")
endif()
set(KILN_PC_PREFIX "@KILN_PC_PREFIX@")
configure_file(${CMAKE_CURRENT_LIST_DIR}/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc.in @ONLY)
install(CODE "set(KILN_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/kiln.pc.in\" \"${PROJECT_BINARY_DIR}/kiln-install.pc\" @ONLY)")
install(FILES ${PROJECT_BINARY_DIR}/kiln-install.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig RENAME kiln.pc)

# The Debian package: `cd build && cpack` writes libkiln-dev_<version>_<arch>.deb (prefix /usr).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME libkiln-dev)
set(CPACK_PACKAGE_VENDOR kiln)
set(CPACK_PACKAGE_CONTACT "kiln developers <kiln@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "kiln: C++20 autograd dataflow framework with JIT kernel generation")
set(CPACK_PACKAGE_DESCRIPTION "kiln records tensor code written in a C++ DSL as a graph, derives gradients as more graph, fuses it into kernels and compiles them at run time with LLVM (CPU) or NVRTC (NVIDIA GPUs). This package holds the headers, libkiln, the CMake package (find_package(kiln)) and kiln.pc.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
if(KILN_SHARED)
  # dpkg-shlibdeps derives the run-time Depends from libkiln.so's DT_NEEDED entries
  # (libllvm19, libtbb12, zlib1g, libstdc++6, libc6, libgcc-s1).
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
else()
  # A static libkiln is linked by its users together with LLVM, oneTBB and zlib.
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "llvm-19-dev, libtbb-dev, zlib1g-dev")
endif()
include(CPack)
