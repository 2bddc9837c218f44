# cmake/egpu_layers.cmake - the layers of DESIGN.md section 4 as the link graph.
#
# src/core, src/api, src/kube and src/net are the shared layers; every other
# folder is a component with one library of its own (a few have two):
#
#   sched       egpu_sched                 src/scheduler
#   agent       egpu_agent egpu_proto      src/agent (and proto/, the kubelet's messages)
#   webhook     egpu_webhook               src/webhook
#   controller  egpu_controller            src/controller
#   kubectl     egpu_kubectl               src/kubectl
#   sim         egpu_sim                   src/sim
#   vcuda       egpu_vcuda_core            src/vcuda (below it only egpu_core and egpu_log:
#                                          the interposer links libc and nothing else)
#
# A component's library links the shared layers and nothing else, and so does
# each binary and each unit test, with its own component's library: code in
# one component that calls a function only another defines fails to link.
# scripts/checksrc.sh refuses the #include first; this is the linker's half.
# Three checks (egpu_layers_check, called once every target exists):
#   - at configure time, no library of the layers names another component's
#     library, and no executable or shared library names two components
#     (EGPU_LAYER_CONTRACT on a test lists the one or two it may add, with
#     the reason next to it in tests/CMakeLists.txt);
#   - at build time, egpu_layer_<component> links the whole of its component's
#     libraries (every object, used by a binary or not) against the shared
#     layers alone, so an undefined reference anywhere in it fails `make build`;
#   - the unit test `layering` (tests/layering/check.cmake) shows both refuse
#     a breach: a scheduler-side object that calls the agent's
#     egpu_inventory_publish does not link, and a scratch project whose
#     scheduler library links the agent's does not configure.
set(EGPU_LAYERS_MAIN ${CMAKE_CURRENT_LIST_DIR}/../tests/layering/layer_main.c)
set(EGPU_SHARED_LAYER_LIBS egpu_kube egpu_net egpu_api egpu_core egpu_log)
set(EGPU_COMPONENTS sched agent webhook controller kubectl sim vcuda)
set(EGPU_COMPONENT_sched_LIBS egpu_sched)
set(EGPU_COMPONENT_agent_LIBS egpu_agent egpu_proto)
set(EGPU_COMPONENT_webhook_LIBS egpu_webhook)
set(EGPU_COMPONENT_controller_LIBS egpu_controller)
set(EGPU_COMPONENT_kubectl_LIBS egpu_kubectl)
set(EGPU_COMPONENT_sim_LIBS egpu_sim)
set(EGPU_COMPONENT_vcuda_LIBS egpu_vcuda_core)
# What each component may link below itself.
foreach(c sched agent webhook controller kubectl sim)
  set(EGPU_COMPONENT_${c}_BELOW egpu_kube egpu_net egpu_api egpu_core)
endforeach()
set(EGPU_COMPONENT_vcuda_BELOW egpu_core egpu_log)

# The component a library belongs to, or "" (a shared layer or not ours).
function(egpu_component_of lib out)
  set(found "")
  foreach(c ${EGPU_COMPONENTS})
    if(lib IN_LIST EGPU_COMPONENT_${c}_LIBS)
      set(found ${c})
    endif()
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# Links target with component's libraries (those that exist in this build)
# and the layers below it; component "" links the shared layers alone.
function(egpu_link_component target component)
  set(libs)
  if(component STREQUAL "")
    set(below egpu_kube egpu_net egpu_api egpu_core)
  else()
    if(NOT component IN_LIST EGPU_COMPONENTS)
      message(FATAL_ERROR "egpu_link_component(${target}): no component '${component}' "
                          "(one of ${EGPU_COMPONENTS})")
    endif()
    foreach(lib ${EGPU_COMPONENT_${component}_LIBS})
      if(TARGET ${lib})
        list(APPEND libs ${lib})
      endif()
    endforeach()
    set(below ${EGPU_COMPONENT_${component}_BELOW})
  endif()
  target_link_libraries(${target} PRIVATE ${libs} ${below})
endfunction()

# The components a list of link items names (generator expressions and
# non-targets are ignored).
function(egpu_components_named items out)
  set(comps)
  foreach(item ${items})
    if(item MATCHES "^[A-Za-z0-9_.+-]+$")
      egpu_component_of(${item} c)
      if(c AND NOT c IN_LIST comps)
        list(APPEND comps ${c})
      endif()
    endif()
  endforeach()
  set(${out} ${comps} PARENT_SCOPE)
endfunction()

function(egpu_layers_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    egpu_layers_targets(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(egpu_layers_check)
  set(errors)
  egpu_layers_targets(${CMAKE_SOURCE_DIR} targets)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "UTILITY" OR type STREQUAL "INTERFACE_LIBRARY")
      continue()
    endif()
    get_target_property(direct ${t} LINK_LIBRARIES)
    get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
    set(items)
    foreach(v direct iface)
      if(${v})
        list(APPEND items ${${v}})
      endif()
    endforeach()
    egpu_components_named("${items}" named)
    egpu_component_of(${t} own)
    if(own)
      list(REMOVE_ITEM named ${own})
      if(named)
        list(APPEND errors "  ${t} (component ${own}) links the library of ${named}")
      endif()
    elseif(t IN_LIST EGPU_SHARED_LAYER_LIBS)
      if(named)
        list(APPEND errors "  ${t} (a shared layer) links the library of ${named}")
      endif()
    else()
      get_target_property(contract ${t} EGPU_LAYER_CONTRACT)
      if(contract)
        list(REMOVE_ITEM named ${contract})
      endif()
      list(LENGTH named n)
      if(n GREATER 1)
        list(APPEND errors "  ${t} links the libraries of several components: ${named}")
      endif()
    endif()
  endforeach()
  if(errors)
    list(JOIN errors "\n" text)
    message(FATAL_ERROR "Layering breach (cmake/egpu_layers.cmake, DESIGN.md section 4): a component "
                        "links only itself and the shared layers (core, api, kube, net):\n${text}")
  endif()

  # The whole of each component's libraries against the layers below it.
  foreach(c ${EGPU_COMPONENTS})
    set(whole)
    foreach(lib ${EGPU_COMPONENT_${c}_LIBS})
      if(TARGET ${lib})
        list(APPEND whole "$<TARGET_FILE:${lib}>")
      endif()
    endforeach()
    if(NOT whole)
      continue()
    endif()
    list(JOIN whole " " whole)
    add_executable(egpu_layer_${c} ${EGPU_LAYERS_MAIN})
    target_link_options(egpu_layer_${c} PRIVATE
                        "SHELL:-Wl,--whole-archive ${whole} -Wl,--no-whole-archive")
    egpu_link_component(egpu_layer_${c} ${c})
  endforeach()
endfunction()
