# DS_SONAME(MACRO, LIBRARY, LIBS, FUNCTION): defines MACRO to the soname of
# LIBRARY ("libpq" -> "libpq.so.5"), the NEEDED entry objdump finds in a
# program that calls FUNCTION and links LIBS; LIBRARY.so when there is
# none to read. lazy/lazylib.c opens the library by it on first use.
AC_DEFUN([DS_SONAME], [
AC_CACHE_CHECK([the soname of $2], [ds_cv_soname_$1], [
  ds_cv_soname_$1=
  ds_save_LIBS=$LIBS
  LIBS="$3 $LIBS"
  AC_LINK_IFELSE([AC_LANG_CALL([], [$4])],
    [ds_cv_soname_$1=`${OBJDUMP:-objdump} -p conftest$EXEEXT 2>/dev/null |
      sed -n 's/^ *NEEDED *\($2\.so@<:@^ @:>@*\) *$/\1/p' | sed 1q`])
  LIBS=$ds_save_LIBS
  AS_IF([test -z "$ds_cv_soname_$1"], [ds_cv_soname_$1=$2.so])])
AC_DEFINE_UNQUOTED([$1], ["$ds_cv_soname_$1"], [the soname dlopen opens for $2])
])
