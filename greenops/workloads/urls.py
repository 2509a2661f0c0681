"""Pages of the workloads app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.workloads import views

urlpatterns = [
    path("workloads/", views.workload_list, name="workload-list"),
    path("workloads/pods/", views.pod_list, name="pod-list"),
    path("workloads/pods/namespaces/", views.namespace_map, name="namespace-map"),
    path("workloads/pods/namespaces/<int:mapping_id>/delete/", views.namespace_unmap,
         name="namespace-unmap"),
    path("workloads/new/", views.workload_create, name="workload-create"),
    path("workloads/<slug:workload_slug>/edit/", views.workload_edit, name="workload-edit"),
    path("workloads/<slug:workload_slug>/gpus/", views.workload_gpus, name="workload-gpus"),
    path("workloads/<slug:workload_slug>/gpus/add/", views.workload_gpu_add,
         name="workload-gpu-add"),
    path("api-tokens/", views.api_tokens, name="api-tokens"),
    path("api-tokens/<int:token_id>/revoke/", views.api_token_revoke, name="api-token-revoke"),
]
