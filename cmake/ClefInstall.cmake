# SPDX-License-Identifier: MIT
# What `cmake --install` puts into a prefix, and the Debian package CPack makes of it
# (docs/DEPLOYMENT.md "Installing"):
#   bin/clef                                      the program (nothing else is installed: the engine
#                                                 libraries are static, the tests and benchmarks stay)
#   share/man/man1/clef.1                         man page, written from `clef --help` after each link
#   share/bash-completion/completions/clef        bash completion (packaging/clef.bash)
#   share/doc/clef/                               README.md, CHANGELOG.md, LICENSE (and `copyright`),
#                                                 docs/, examples/ (SystemOne requests)
# The version is project()'s VERSION (top-level CMakeLists.txt): `clef --version`, the man page and
# the package all read it from there.
include(GNUInstallDirs)

install(TARGETS clef RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(CLEF_MAN_PAGE AND NOT CMAKE_CROSSCOMPILING)
  install(FILES "${CLEF_MAN_PAGE_FILE}" DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()
install(FILES packaging/clef.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME clef)
install(FILES README.md CHANGELOG.md LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
# Debian's place for the license text.
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The Debian package: clef_<version>_amd64.deb, installed under /usr. dpkg-shlibdeps (dpkg-dev, part
# of build-essential) derives the Depends line from the libraries the binary links (libdnnl3,
# libopenblas0, libhwy1, libcurl4, libssl3, ...), so it names exactly the Debian runtime packages.
# Make it after building the clef target: `cd build/release && cpack` (cpack builds nothing itself;
# docs/DEPLOYMENT.md "The Debian package").
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME clef)
set(CPACK_PACKAGE_VENDOR "the clef.cpp authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "local runtime for Clef decision models (SystemOne requests in, probabilities out)")
set(CPACK_PACKAGE_DESCRIPTION "clef runs Cloudflare's Clef decision models (Qwen3.5 backbone + joint schema head) on the CPU: \
clef decide answers a SystemOne request, clef serve is an HTTP server, clef mcp a Model Context Protocol server, \
clef pull fetches models from the Hugging Face hub. Without a model it uses a tiny embedded random-weight model.")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "the clef.cpp authors")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "bash-completion")
set(CPACK_SOURCE_GENERATOR "")
include(CPack)
