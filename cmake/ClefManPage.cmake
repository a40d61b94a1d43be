# SPDX-License-Identifier: MIT
# Writes the clef(1) man page from the program's own help, so that it never drifts from it:
#   cmake -DCLEF=path/to/clef -DOUT=path/to/clef.1 -P cmake/ClefManPage.cmake
# NAME and SYNOPSIS come first, then DESCRIPTION with `clef --help` (its command list, exit codes and
# environment), then one COMMANDS subsection per command listed there, each holding `clef CMD --help`
# verbatim, then FILES and SEE ALSO. The version is `clef --version`'s first line. The apps/clef build
# runs this after every link of `clef` (cmake/ClefInstall.cmake), and `cmake --install` installs the result.
cmake_minimum_required(VERSION 3.25)
if(NOT CLEF OR NOT OUT)
  message(FATAL_ERROR "ClefManPage.cmake: give -DCLEF=<the clef binary> -DOUT=<the man page to write>")
endif()

function(clef_help out_var)
  execute_process(COMMAND "${CLEF}" ${ARGN} OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ClefManPage.cmake: `clef ${ARGN}` exited ${rc}: ${err}")
  endif()
  # --threads' range is the building machine's CPU count; the page is read on other machines.
  string(REGEX REPLACE "--threads INT:INT in \\[0 - [0-9]+\\]" "--threads INT:INT in [0 - the CPUs of the machine]"
         text "${text}")
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# Help text as roff: every line kept as it is (.nf), backslashes escaped, lines that start with a
# period or an apostrophe guarded so that roff does not read them as requests.
function(roff_verbatim out_var text)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out_var} ".nf\n${text}.fi\n" PARENT_SCOPE)
endfunction()

clef_help(version --version)
string(REGEX MATCH "^clef ([^\n]*)" _ "${version}")
set(version "${CMAKE_MATCH_1}")
clef_help(top --help)

# The commands: the names listed under "Subcommands:" in `clef --help` (CLI11's layout; older CLI11
# versions print "SUBCOMMANDS:").
set(commands "")
string(FIND "${top}" "\nSubcommands:" at)
if(at LESS 0)
  string(FIND "${top}" "\nSUBCOMMANDS:" at)
endif()
if(at LESS 0)
  message(FATAL_ERROR "ClefManPage.cmake: `clef --help` lists no Subcommands:")
endif()
string(SUBSTRING "${top}" ${at} -1 listing)
string(REPLACE "\n" ";" listing "${listing}")
foreach(line IN LISTS listing)
  if(line MATCHES "^  ([a-z][a-z0-9-]*)( |$)")
    list(APPEND commands "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT commands)
  message(FATAL_ERROR "ClefManPage.cmake: found no command names in `clef --help`")
endif()

set(page ".\\\" clef(1): written by cmake/ClefManPage.cmake from `clef --help`; do not edit.\n")
string(APPEND page ".TH CLEF 1 \"\" \"clef ${version}\" \"User Commands\"\n")
string(APPEND page ".SH NAME\nclef \\- run Clef decision models locally (SystemOne requests in, probabilities out)\n")
string(APPEND page ".SH SYNOPSIS\n.B clef\n.I command\n[\\fIoptions\\fR] [\\fIarguments\\fR]\n.br\n.B clef\n\\-\\-help | \\-\\-version\n")
roff_verbatim(body "${top}")
string(APPEND page ".SH DESCRIPTION\n${body}")
string(APPEND page ".SH COMMANDS\n")
foreach(cmd IN LISTS commands)
  clef_help(text ${cmd} --help)
  roff_verbatim(body "${text}")
  string(APPEND page ".SS clef ${cmd}\n${body}")
endforeach()
string(APPEND page ".SH FILES\n.TP\n~/.cache/clef/default-model\n")
string(APPEND page "The embedded default model (tiny, random weights), written on first use when no \\-m is given ")
string(APPEND page "(\\fB$CLEF_HOME\\fR/default-model, else \\fB$XDG_CACHE_HOME\\fR/clef/default-model first).\n")
string(APPEND page ".TP\n~/.cache/huggingface/hub\nModels by name (the Hugging Face cache shared with huggingface_hub, transformers and llama.cpp).\n")
string(APPEND page ".TP\nshare/doc/clef/ under the install prefix (/usr for the package)\nREADME.md, docs/ (the protocol, models, deployment) and examples/ (SystemOne requests).\n")
string(APPEND page ".SH SEE ALSO\nREADME.md and docs/PROTOCOL.md in share/doc/clef under the install prefix (or the source tree).\n")
file(WRITE "${OUT}.tmp" "${page}")
file(RENAME "${OUT}.tmp" "${OUT}")
