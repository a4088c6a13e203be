# Installation, the CMake package (find_package(sluice)) and the link
# manifest `sluice compile` links executables with.
#
# Installed tree:
#   bin/sluice                               the driver (needs MLIR/LLVM 19)
#   libexec/sluice/sluice-serve              the driver with gRPC, which
#                                            `sluice serve` runs
#   include/sluice/Pipeline.h                the pipeline API (sluice::sluice)
#   include/sluice/{ops,runtime,dsl,autotune}/...  the headers it includes
#   <libdir>/libsluice.so                    the API with the compiler, the
#                                            autotuner and the runtime
#   <libdir>/libsluice_{runtime,ops}.a       the runtime alone, for C++
#                                            programs that run plan JSON
#   <libdir>/libsluice_{dsl,runflags,autotune,pipeline_core,exe_main}.a
#                                            the rest of a compiled
#                                            executable (main(), run flags)
#   <libdir>/sluice/exe-link.txt             the link manifest (below)
#   <libdir>/sluice/exe-link-serve.txt       the same for `sluice compile
#                                            --serve`: plus the gRPC worker
#   <libdir>/cmake/sluice/                   sluiceConfig.cmake & co.
#
# The link manifest is one linker argument a line: the static libraries a
# compiled executable needs and the shared libraries they depend on, found
# by walking the targets' link interfaces here, so a dependency added to a
# library (target_link_libraries) reaches `sluice compile` without a second
# list to keep. `${dir}` stands for the manifest's directory. The build tree
# gets its own copy at the same path relative to bin/ (absolute paths), so
# the driver finds the right one from its own location.

include(CMakePackageConfigHelpers)

# Appends the link items of `target` (and everything it links) to the lists
# named by build_var / install_var, depth first; `whole` wraps a static
# library in --whole-archive (ops register themselves from static
# initializers).
function(_sluice_link_items target whole build_var install_var seen_var)
  set(build ${${build_var}})
  set(install ${${install_var}})
  set(seen ${${seen_var}})
  if("${target}" IN_LIST seen)
    return()
  endif()
  list(APPEND seen "${target}")
  if(TARGET ${target})
    get_target_property(type ${target} TYPE)
    get_target_property(imported ${target} IMPORTED)
    if(target MATCHES "^(MLIR|LLVM)" )
      message(FATAL_ERROR "a compiled executable must not link ${target}")
    endif()
    if(NOT imported AND type STREQUAL "STATIC_LIBRARY")
      if(whole)
        list(APPEND build "-Wl,--whole-archive" "$<TARGET_FILE:${target}>"
                          "-Wl,--no-whole-archive")
        list(APPEND install "-Wl,--whole-archive"
                            "\${dir}/../$<TARGET_FILE_NAME:${target}>"
                            "-Wl,--no-whole-archive")
      else()
        list(APPEND build "$<TARGET_FILE:${target}>")
        list(APPEND install "\${dir}/../$<TARGET_FILE_NAME:${target}>")
      endif()
    elseif(imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      list(APPEND build "$<TARGET_FILE:${target}>")
      list(APPEND install "$<TARGET_FILE:${target}>")
    elseif(NOT imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      message(FATAL_ERROR "cannot link ${target} (${type}) into executables")
    endif()
    get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
    if(deps)
      foreach(dep IN LISTS deps)
        set(depWhole OFF)
        if(dep MATCHES "^\\$<LINK_ONLY:(.*)>$")
          set(dep "${CMAKE_MATCH_1}")
        endif()
        if(dep MATCHES "^\\$<LINK_LIBRARY:WHOLE_ARCHIVE,(.*)>$")
          set(dep "${CMAKE_MATCH_1}")
          set(depWhole ON)
        endif()
        if(dep MATCHES "^\\$<")
          message(FATAL_ERROR "${target} links '${dep}': teach "
            "cmake/SluiceInstall.cmake this generator expression")
        endif()
        _sluice_link_items("${dep}" ${depWhole} build install seen)
      endforeach()
    endif()
  elseif(target MATCHES "::")
    message(FATAL_ERROR "cannot see the imported target ${target} from the "
      "top-level directory: find its package in the top-level CMakeLists")
  elseif(target MATCHES "^-" OR IS_ABSOLUTE "${target}")
    list(APPEND build "${target}")
    list(APPEND install "${target}")
  elseif(NOT target STREQUAL "")
    list(APPEND build "-l${target}")
    list(APPEND install "-l${target}")
  endif()
  set(${build_var} ${build} PARENT_SCOPE)
  set(${install_var} ${install} PARENT_SCOPE)
  set(${seen_var} ${seen} PARENT_SCOPE)
endfunction()

# Writes the manifest `name` (exe-link.txt, exe-link-serve.txt) for the
# targets given after it (each "target" or "WHOLE:target"), in the build
# tree beside SLUICE_EXE_MANIFEST_REL and under install/ for `cmake
# --install`.
function(_sluice_manifest name)
  set(_build "")
  set(_install "")
  set(_seen "")
  foreach(t IN LISTS ARGN)
    if(t MATCHES "^WHOLE:(.*)$")
      _sluice_link_items(${CMAKE_MATCH_1} ON _build _install _seen)
    else()
      _sluice_link_items(${t} OFF _build _install _seen)
    endif()
  endforeach()
  # A sanitizer build's libraries need the sanitizer runtime at link time:
  # executables `sluice compile` writes from them are sanitized too.
  if(SLUICE_SANITIZE)
    list(APPEND _build ${SLUICE_SANITIZE_LINK_FLAGS})
    list(APPEND _install ${SLUICE_SANITIZE_LINK_FLAGS})
  endif()
  list(JOIN _build "\n" _build)
  list(JOIN _install "\n" _install)
  set(_head "# sluice ${PROJECT_VERSION}: what `sluice compile` links a compiled executable with\n# (one linker argument a line; \${dir} is this file's directory)\n")
  get_filename_component(_dir "${CMAKE_BINARY_DIR}/${SLUICE_EXE_MANIFEST_REL}"
    DIRECTORY)
  file(GENERATE OUTPUT "${_dir}/${name}" CONTENT "${_head}${_build}\n")
  file(GENERATE OUTPUT "${CMAKE_BINARY_DIR}/install/${name}"
    CONTENT "${_head}${_install}\n")
endfunction()
_sluice_manifest(exe-link.txt sluice_exe_main)
# `sluice compile --serve`: main() finds the worker through a hook the
# serving library fills in from a static initializer, so it is linked whole.
_sluice_manifest(exe-link-serve.txt WHOLE:sluice_exe_serve sluice_exe_main)

# The embeddable runtime: the exported targets, include paths relative to the
# installed prefix.
set_target_properties(sluice_ops_objs PROPERTIES EXPORT_NAME ops_objs
                                                 OUTPUT_NAME sluice_ops)
set_target_properties(sluice_ops PROPERTIES EXPORT_NAME ops)
set_target_properties(sluice_runtime_objs PROPERTIES EXPORT_NAME runtime_objs
                                                     OUTPUT_NAME sluice_runtime)
set_target_properties(sluice_runtime PROPERTIES EXPORT_NAME runtime)
install(TARGETS sluice_ops_objs sluice_ops sluice_runtime_objs sluice_runtime
  EXPORT sluiceTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The pipeline API (find_package(sluice) -> sluice::sluice): a spec or plan
# compiled, generated kernels, `schedule: auto`, batches (examples/cpp/).
install(TARGETS sluice_shared EXPORT sluiceTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# What a compiled executable links besides the runtime (not exported: only
# `sluice compile` uses them, through the manifest).
install(TARGETS sluice_dsl sluice_runflags sluice_autotune
  sluice_pipeline_core sluice_exe_main sluice_exe_serve sluice_serve_flags
  sluice_remote sluice_remote_proto
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${SLUICE_SOURCE_DIR}/ops/include/sluice
                  ${SLUICE_SOURCE_DIR}/runtime/include/sluice
                  ${SLUICE_SOURCE_DIR}/dsl/include/sluice
                  ${SLUICE_SOURCE_DIR}/autotune/include/sluice
                  ${SLUICE_SOURCE_DIR}/api/include/sluice
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES "${CMAKE_BINARY_DIR}/install/exe-link.txt"
  "${CMAKE_BINARY_DIR}/install/exe-link-serve.txt"
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/sluice)
install(EXPORT sluiceTargets NAMESPACE sluice::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
configure_package_config_file(
  ${SLUICE_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
  ${CMAKE_BINARY_DIR}/install/sluiceConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice
  PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/install/sluiceConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install/sluiceConfig.cmake
              ${CMAKE_BINARY_DIR}/install/sluiceConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
