# tests/layering/check.cmake - the test `layering`: the build refuses a
# layering breach (cmake/egpu_layers.cmake). cmake -DBUILD_DIR= -DSCRATCH_DIR=
# -DSOURCE_DIR= -DC_COMPILER= -P check.cmake; fails with a message naming the
# step that did not go as it must.
function(build target out_rc out_text)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${target}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE text)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

# 1. The control links: breach.c itself is sound, with the agent's library.
build(egpu_layer_breach_control rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "layering: the control (breach.c linked with the agent's library too) "
                      "does not build:\n${text}")
endif()

# 2. Linked as the scheduler is, the same object is refused by the linker,
#    for the agent's function and nothing else.
file(REMOVE ${BUILD_DIR}/tests/layering/egpu_layer_breach)
build(egpu_layer_breach rc text)
if(rc EQUAL 0)
  message(FATAL_ERROR "layering: a scheduler-side object calling the agent's "
                      "egpu_inventory_publish linked: the breach went through")
endif()
if(NOT text MATCHES "undefined (reference to .egpu_inventory_publish|symbol: egpu_inventory_publish)")
  message(FATAL_ERROR "layering: the breach failed, but not for the undefined "
                      "egpu_inventory_publish:\n${text}")
endif()
string(REGEX MATCHALL "undefined reference to `[^']*'" refs "${text}")
list(REMOVE_DUPLICATES refs)
message(STATUS "layering: the link of the breach is refused: ${refs}")

# 3. A component library that names another's library fails to configure;
#    the same project without that link configures.
foreach(breach ON OFF)
  file(REMOVE_RECURSE ${SCRATCH_DIR}/${breach})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/layering/scratch
                          -B ${SCRATCH_DIR}/${breach} -DBREACH=${breach}
                          -DEGPU_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_C_COMPILER=${C_COMPILER}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE text)
  if(breach AND rc EQUAL 0)
    message(FATAL_ERROR "layering: egpu_sched linking egpu_agent configured:\n${text}")
  endif()
  if(breach AND NOT text MATCHES "egpu_sched \\(component sched\\) links the library of agent")
    message(FATAL_ERROR "layering: the scratch project failed, but not for the breach:\n${text}")
  endif()
  if(NOT breach AND NOT rc EQUAL 0)
    message(FATAL_ERROR "layering: the scratch project without a breach fails:\n${text}")
  endif()
endforeach()
message(STATUS "layering: egpu_sched linking egpu_agent is refused at configure time")
