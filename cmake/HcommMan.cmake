# Man pages of the installed programs, generated from their --help (help2man
# is not a build dependency): at install time each program of the build tree
# runs with --help and its text becomes section 1 page NAME.1 under
# share/man/man1 (hcommrun.1, hcomm_info.1, hcomm_stats.1, hcomm-pingpong.1,
# hcomm-allreduce-bw.1, ...). Run as a script:
#   cmake -DTOOL=path -DNAME=name -DVERSION=x.y.z -DOUT=file.1 -P HcommMan.cmake
if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND ${TOOL} --help OUTPUT_VARIABLE _help ERROR_VARIABLE _err
                  RESULT_VARIABLE _rc TIMEOUT 20)
  if(NOT _rc EQUAL 0 OR _help STREQUAL "")
    message(FATAL_ERROR "${TOOL} --help: exit ${_rc}: ${_err}")
  endif()
  string(REGEX MATCH "^[^\n]*" _first "${_help}")
  string(REPLACE "\\" "\\e" _help "${_help}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" _help "${_help}")
  string(REPLACE "-" "\\-" _name_esc "${NAME}")
  string(TIMESTAMP _date "%Y-%m-%d" UTC)
  file(WRITE ${OUT} ".TH \"${NAME}\" 1 \"${_date}\" \"hcomm ${VERSION}\" \"hcomm\"\n"
    ".SH NAME\n${_name_esc} \\- a program of hcomm ${VERSION}, the communication library\n"
    ".SH SYNOPSIS\n.nf\n${NAME} --help\n.fi\n"
    ".SH DESCRIPTION\nThe text of \\fB${NAME} --help\\fR:\n.PP\n.nf\n${_help}.fi\n"
    ".SH SEE ALSO\nhcommrun(1), hcomm_info(1); /usr/share/doc/hcomm/README.md and docs/\n")
  return()
endif()

# Included from HcommInstall.cmake: pairs of (target, installed name).
function(hcomm_install_man)
  set(_pairs ${ARGN})
  set(_code "")
  while(_pairs)
    list(POP_FRONT _pairs _t _n)
    # a program that is not installed (mem_bench) gets no page
    string(APPEND _code "
    if(EXISTS \"\$ENV{DESTDIR}\${_bindir}/${_n}\")
      execute_process(COMMAND \"${CMAKE_COMMAND}\" -DTOOL=${_t} -DNAME=${_n}
        -DVERSION=${PROJECT_VERSION} -DOUT=${PROJECT_BINARY_DIR}/man/${_n}.1
        -P ${CMAKE_CURRENT_FUNCTION_LIST_FILE} RESULT_VARIABLE _rc)
      if(NOT _rc EQUAL 0)
        message(FATAL_ERROR \"man page of ${_n}: failed\")
      endif()
      file(INSTALL DESTINATION \"\${_mandir}\" TYPE FILE FILES \"${PROJECT_BINARY_DIR}/man/${_n}.1\")
    endif()")
  endwhile()
  install(CODE "
    set(_mandir \"${CMAKE_INSTALL_MANDIR}/man1\")
    if(NOT IS_ABSOLUTE \"\${_mandir}\")
      set(_mandir \"\${CMAKE_INSTALL_PREFIX}/\${_mandir}\")
    endif()
    set(_bindir \"${CMAKE_INSTALL_BINDIR}\")
    if(NOT IS_ABSOLUTE \"\${_bindir}\")
      set(_bindir \"\${CMAKE_INSTALL_PREFIX}/\${_bindir}\")
    endif()
    file(MAKE_DIRECTORY \"${PROJECT_BINARY_DIR}/man\")${_code}
  ")
endfunction()
