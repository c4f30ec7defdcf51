# Install rules (PRODUCT.md §10): `cmake --install build [--prefix DIR]`, DESTDIR honoured.
#
#   <prefix>/bin/tarmac                          src/apps/CMakeLists.txt installs it; not the simulator
#   <TARMAC_SYSTEMD_UNIT_DIR>/tarmac-agent.service   from packaging/systemd/tarmac-agent.service.in
#   <TARMAC_SYSTEMD_UNIT_DIR>/tarmac-reap.{service,timer}  the hourly reaper pass (docs/reap.md), not enabled
#   <TARMAC_TMPFILES_DIR>/tarmac.conf            packaging/tmpfiles.d/tarmac.conf: /run/tarmac/locks at boot
#   <sysconfdir>/tarmac/tarmac.toml              `tarmac config --defaults`; an existing one is kept
#   <docdir>/*.md, <docdir>/tarmac.toml.default  docs/*.md and a pristine copy of the defaults
#   <datadir>/tarmac/grafana/tarmac.json         the Grafana dashboard for tarmac's own metrics
#   <datadir>/tarmac/prometheus/tarmac-rules.yml  the alert and recording rules (tarmac alerts --prometheus-rules)
#   <mandir>/man1/tarmac.1.gz                    `tarmac man`
#   <datadir>/bash-completion/completions/tarmac `tarmac completion bash`; zsh's _tarmac in
#   <datadir>/zsh/vendor-completions, fish's tarmac.fish in <datadir>/fish/vendor_completions.d
#
# The units name the installed binary, so they are written at install time with the prefix the
# install uses (a `--prefix` given to `cmake --install` included); the build tree also gets them for
# the configured prefix (build/packaging/systemd/) to inspect or verify.
include(GNUInstallDirs)

set(TARMAC_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where tarmac-agent.service and the reaper's units are installed: relative to the install prefix, or absolute")
set(TARMAC_SYSTEMD_UNITS tarmac-agent.service tarmac-reap.service tarmac-reap.timer)
set(TARMAC_INSTALLED_UNITS ${TARMAC_SYSTEMD_UNITS})

# The default configuration, generated from the built binary so that it can never drift from it.
set(_tarmac_default_config "${CMAKE_BINARY_DIR}/packaging/tarmac.toml")
add_custom_command(
  OUTPUT "${_tarmac_default_config}"
  COMMAND sh -c "\"$1\" config --defaults > \"$2.tmp\" && mv \"$2.tmp\" \"$2\"" sh $<TARGET_FILE:tarmac>
          "${_tarmac_default_config}"
  DEPENDS tarmac
  COMMENT "Generating packaging/tarmac.toml (tarmac config --defaults)"
  VERBATIM)
# The manual page and the completions, from the built binary's command line (docs_command.cpp), and
# the Prometheus rules from its default alert rules: none of them can drift from the binary.
set(_tarmac_generated "${CMAKE_BINARY_DIR}/packaging/generated")
set(_tarmac_generated_files "${_tarmac_generated}/tarmac.1.gz" "${_tarmac_generated}/tarmac.bash"
    "${_tarmac_generated}/_tarmac" "${_tarmac_generated}/tarmac.fish" "${_tarmac_generated}/tarmac-rules.yml")
add_custom_command(
  OUTPUT ${_tarmac_generated_files}
  COMMAND sh "${PROJECT_SOURCE_DIR}/packaging/generate.sh" $<TARGET_FILE:tarmac> "${_tarmac_generated}"
  DEPENDS tarmac "${PROJECT_SOURCE_DIR}/packaging/generate.sh"
  COMMENT "Generating the manual page, shell completions and Prometheus rules"
  VERBATIM)
add_custom_target(tarmac_packaging ALL DEPENDS "${_tarmac_default_config}" ${_tarmac_generated_files})

# The unit for the configured prefix, in the build tree.
set(TARMAC_BIN "${CMAKE_INSTALL_FULL_BINDIR}/tarmac")
set(TARMAC_DOCDIR "${CMAKE_INSTALL_FULL_DOCDIR}")
set(TARMAC_CONFIG_ARGS "")
if(NOT CMAKE_INSTALL_FULL_SYSCONFDIR STREQUAL "/etc")
  # tarmac reads /etc/tarmac/tarmac.toml by default; elsewhere the unit names the installed file.
  set(TARMAC_CONFIG_ARGS " --config ${CMAKE_INSTALL_FULL_SYSCONFDIR}/tarmac/tarmac.toml")
endif()
foreach(_tarmac_unit IN LISTS TARMAC_SYSTEMD_UNITS)
  configure_file("${PROJECT_SOURCE_DIR}/packaging/systemd/${_tarmac_unit}.in"
                 "${CMAKE_BINARY_DIR}/packaging/systemd/${_tarmac_unit}" @ONLY)
endforeach()

install(DIRECTORY "${PROJECT_SOURCE_DIR}/docs/" DESTINATION "${CMAKE_INSTALL_DOCDIR}"
        FILES_MATCHING PATTERN "*.md")
install(FILES "${_tarmac_default_config}" DESTINATION "${CMAKE_INSTALL_DOCDIR}" RENAME tarmac.toml.default)
install(FILES "${PROJECT_SOURCE_DIR}/packaging/grafana/tarmac.json" DESTINATION "${CMAKE_INSTALL_DATADIR}/tarmac/grafana")
install(FILES "${_tarmac_generated}/tarmac-rules.yml" DESTINATION "${CMAKE_INSTALL_DATADIR}/tarmac/prometheus")
install(FILES "${_tarmac_generated}/tarmac.1.gz" DESTINATION "${CMAKE_INSTALL_MANDIR}/man1")
install(FILES "${_tarmac_generated}/tarmac.bash" DESTINATION "${CMAKE_INSTALL_DATADIR}/bash-completion/completions"
        RENAME tarmac)
install(FILES "${_tarmac_generated}/_tarmac" DESTINATION "${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions")
install(FILES "${_tarmac_generated}/tarmac.fish" DESTINATION "${CMAKE_INSTALL_DATADIR}/fish/vendor_completions.d")
set(TARMAC_TMPFILES_DIR "lib/tmpfiles.d" CACHE STRING
    "Where tarmac.conf for systemd-tmpfiles (the lock directory, docs/scheduler.md) is installed")
install(FILES "${PROJECT_SOURCE_DIR}/packaging/tmpfiles.d/tarmac.conf" DESTINATION "${TARMAC_TMPFILES_DIR}")

# Install time: the unit and tarmac.toml, with the directories of the prefix in use then (the same
# rules as GNUInstallDirs' CMAKE_INSTALL_FULL_<dir>: /usr and / put sysconfdir at /etc, /opt/x at
# /etc/opt/x). The script runs inside cmake_install.cmake, where CMAKE_INSTALL_PREFIX is final.
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/packaging/install_packaging.cmake" @ONLY CONTENT [=[
# Generated by cmake/install.cmake; run by `cmake --install`.
function(tarmac_full_dir out rel kind)
  set(prefix "${CMAKE_INSTALL_PREFIX}")
  if(IS_ABSOLUTE "${rel}")
    set(full "${rel}")
  elseif(kind STREQUAL "SYSCONFDIR" AND (prefix STREQUAL "/" OR prefix MATCHES "^/usr/?$"))
    set(full "/${rel}")
  elseif(kind STREQUAL "SYSCONFDIR" AND prefix MATCHES "^/opt/" AND NOT prefix MATCHES "^/opt/homebrew/")
    set(full "/${rel}${prefix}")
  elseif(prefix STREQUAL "/")
    if(NOT rel MATCHES "^usr/")
      set(rel "usr/${rel}")
    endif()
    set(full "/${rel}")
  else()
    set(full "${prefix}/${rel}")
  endif()
  set(${out} "${full}" PARENT_SCOPE)
endfunction()

tarmac_full_dir(_tarmac_bindir "@CMAKE_INSTALL_BINDIR@" BINDIR)
tarmac_full_dir(_tarmac_docdir "@CMAKE_INSTALL_DOCDIR@" DOCDIR)
tarmac_full_dir(_tarmac_sysconfdir "@CMAKE_INSTALL_SYSCONFDIR@" SYSCONFDIR)
tarmac_full_dir(_tarmac_unitdir "@TARMAC_SYSTEMD_UNIT_DIR@" UNITDIR)

# The systemd units.
set(TARMAC_BIN "${_tarmac_bindir}/tarmac")
set(TARMAC_DOCDIR "${_tarmac_docdir}")
set(TARMAC_CONFIG_ARGS "")
if(NOT _tarmac_sysconfdir STREQUAL "/etc")
  set(TARMAC_CONFIG_ARGS " --config ${_tarmac_sysconfdir}/tarmac/tarmac.toml")
endif()
foreach(_tarmac_name @TARMAC_INSTALLED_UNITS@)
  file(READ "@PROJECT_SOURCE_DIR@/packaging/systemd/${_tarmac_name}.in" _tarmac_unit)
  string(CONFIGURE "${_tarmac_unit}" _tarmac_unit @ONLY)
  set(_tarmac_unit_file "$ENV{DESTDIR}${_tarmac_unitdir}/${_tarmac_name}")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_tarmac_unit_file}")
  set(_tarmac_old "")
  if(EXISTS "${_tarmac_unit_file}")
    file(READ "${_tarmac_unit_file}" _tarmac_old)
  endif()
  if(_tarmac_old STREQUAL _tarmac_unit)
    message(STATUS "Up-to-date: ${_tarmac_unit_file}")
  else()
    message(STATUS "Installing: ${_tarmac_unit_file}")
    file(MAKE_DIRECTORY "$ENV{DESTDIR}${_tarmac_unitdir}")
    file(WRITE "${_tarmac_unit_file}" "${_tarmac_unit}")
  endif()
endforeach()

# tarmac.toml: an administrator's file is never overwritten.
if(EXISTS "$ENV{DESTDIR}${_tarmac_sysconfdir}/tarmac/tarmac.toml")
  message(STATUS "Keeping: $ENV{DESTDIR}${_tarmac_sysconfdir}/tarmac/tarmac.toml "
                 "(the defaults: ${_tarmac_docdir}/tarmac.toml.default)")
else()
  file(INSTALL DESTINATION "${_tarmac_sysconfdir}/tarmac" TYPE FILE FILES "@_tarmac_default_config@")
endif()
]=])
install(SCRIPT "${CMAKE_BINARY_DIR}/packaging/install_packaging.cmake")
