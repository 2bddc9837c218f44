# cmake/egpu_c.cmake - the project's C settings: C17 without extensions,
# RelWithDebInfo unless asked otherwise, every warning an error, POSIX 2008.
# Included by the top-level CMakeLists.txt and by bench/gpu and bench/vcuda
# when they are built on their own, so all three compile alike.
set(CMAKE_C_STANDARD 17)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE RelWithDebInfo)
endif()
add_compile_options(-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
                    -Wmissing-prototypes -Wformat=2 -Wvla)
add_compile_definitions(_POSIX_C_SOURCE=200809L)
