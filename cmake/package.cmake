# The Debian package (PRODUCT.md §10): `cpack --config build/CPackConfig.cmake -G DEB` after a build
# makes tarmac_<version>_<arch>.deb from the install rules (cmake/install.cmake) with prefix /usr:
#   /usr/bin/tarmac, /lib/systemd/system/tarmac-{agent,reap}.{service,timer}, /lib/tmpfiles.d,
#   /etc/tarmac/tarmac.toml (a conffile: an edited one survives upgrades and removal; purge removes
#   it), the manual page, bash/zsh/fish completions, the Grafana dashboard and the Prometheus rules
#   under /usr/share/tarmac, the docs under /usr/share/doc/tarmac.
# Maintainer scripts (packaging/deb/): daemon-reload and the lock directory; nothing is enabled or
# started unasked. Its dependencies come from the binary's own (dpkg-shlibdeps). The release preset
# is what a published package is built from; CI builds one from its dev tree to test
# installing, removing and purging it (tests/integration/test_deb.py).
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "tarmac")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "tarmac developers <tarmac@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "see what every NVIDIA GPU is really doing, and keep the fleet flying")
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
       "tarmac shows what every NVIDIA GPU is really doing (busy, starved, holding memory, idle),\n"
       "diagnoses broken training launches, records telemetry with a dcgm-exporter compatible\n"
       "/metrics endpoint, alerts, schedules jobs onto free GPUs, reclaims idle leases and ends\n"
       "processes that hold GPU memory without working. It loads NVIDIA's libnvidia-ml at run time.")
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Loaded at run time by the features that need them, so not in the binary's own dependencies
# (Ubuntu 24.04 names them with t64): OpenSSL, without which an agent whose web config asks for HTTPS
# or passwords refuses to start, is required (an upgrade from a build that had it linked in must not
# stop a working agent); libcurl (webhooks, backfill) is recommended. CPack adds dpkg-shlibdeps'.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libssl3 | libssl3t64")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libcurl4 | libcurl4t64")
set(CPACK_STRIP_FILES ON)
# Installed with DESTDIR and prefix /usr, as `cmake --install --prefix /usr` does: the install
# script then puts tarmac.toml in /etc and names /usr/bin/tarmac in the units.
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/deb/conffiles" "${PROJECT_SOURCE_DIR}/packaging/deb/postinst"
    "${PROJECT_SOURCE_DIR}/packaging/deb/prerm" "${PROJECT_SOURCE_DIR}/packaging/deb/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
